//! Registered memory of one simulated node: regions, their keys and bounds,
//! and the gather/scatter the RC engine does on them.
//!
//! Access checks follow verbs and DOCA's permission matrix: an RDMA WRITE
//! needs REMOTE_WRITE on the target region, a READ needs REMOTE_READ, a SEND
//! needs only a posted receive; remote keys must belong to the QP's PD.
//!
//! A region's bytes are the engine's own (a `Vec`, what the simulator and
//! the udp backend register) or an application's ([`ExternalMemory`], what
//! a C library registers for `ibv_reg_mr`): the engine reaches those only
//! through the trait, so it stays free of `unsafe`.

use std::collections::BTreeMap;
use std::fmt;

use crate::idmap::IdMap;

use rctb_core::transport::{Access, MrId, MrInfo, PdId, Sge};

/// Memory the engine does not own, registered as a region's bytes: an
/// application's buffer, which the engine reads and writes as a NIC's DMA
/// would, from whatever thread drives it. The engine checks every access
/// against the region's length before it calls the trait, so an
/// implementation is given only `offset + len <= ` the registered length.
pub trait ExternalMemory: Send + fmt::Debug {
    /// Appends the `len` bytes at `offset` to `out`.
    fn read_into(&self, offset: u64, len: usize, out: &mut Vec<u8>);
    /// Copies `data` to `offset`.
    fn write(&mut self, offset: u64, data: &[u8]);
}

/// A region's bytes.
#[derive(Debug)]
pub(crate) enum Bytes {
    /// The engine's own.
    Owned(Vec<u8>),
    /// An application's.
    External(Box<dyn ExternalMemory>),
}

impl Bytes {
    /// Appends `len` bytes at `start` to `out` (bounds checked by the caller).
    #[inline]
    pub(crate) fn read_into(&self, start: usize, len: usize, out: &mut Vec<u8>) {
        match self {
            Bytes::Owned(v) => out.extend_from_slice(&v[start..start + len]),
            Bytes::External(m) => m.read_into(start as u64, len, out),
        }
    }

    /// Hands `f` the bytes of `range` (bounds checked by the caller): in
    /// place when they are the engine's own, else a copy.
    pub(crate) fn view(&self, range: std::ops::Range<usize>, f: &mut dyn FnMut(&[u8])) {
        match self {
            Bytes::Owned(v) => f(&v[range]),
            Bytes::External(m) => {
                let mut out = Vec::with_capacity(range.len());
                m.read_into(range.start as u64, range.len(), &mut out);
                f(&out);
            }
        }
    }

    /// Copies `data` to `start` (bounds checked by the caller).
    #[inline]
    pub(crate) fn write(&mut self, start: usize, data: &[u8]) {
        match self {
            Bytes::Owned(v) => v[start..start + data.len()].copy_from_slice(data),
            Bytes::External(m) => m.write(start as u64, data),
        }
    }
}

#[derive(Debug)]
pub(crate) struct Region {
    pub info: MrInfo,
    pub pd: PdId,
    pub data: Bytes,
    /// GPU memory: RDMA writes wait here, invisible, until a flush (as
    /// GPUDirect RDMA writes need a flush before the GPU sees them).
    pub pending: Option<Vec<(u64, Vec<u8>)>>,
}

/// Why a remote access was refused (all become NAK remote access error).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RemoteAccessFault {
    UnknownRkey,
    WrongPd,
    NoPermission,
    OutOfBounds,
}

/// Why a local gather/scatter failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LocalFault {
    /// Unknown region or wrong PD (LOC_PROT_ERR).
    Protection,
    /// The SGE does not fit its region, or data exceeds the SGE list (LOC_LEN_ERR).
    Length,
}

/// The registered regions of a node.
#[derive(Debug, Default)]
pub struct Memory {
    regions: IdMap<Region>,
    by_rkey: BTreeMap<u32, MrId>,
}

impl Memory {
    pub(crate) fn insert(&mut self, region: Region) {
        self.by_rkey.insert(region.info.rkey, region.info.id);
        self.regions.insert(region.info.id.0, region);
    }

    pub(crate) fn remove(&mut self, mr: MrId) -> Option<Region> {
        let region = self.regions.remove(mr.0)?;
        self.by_rkey.remove(&region.info.rkey);
        Some(region)
    }

    pub(crate) fn get(&self, mr: MrId) -> Option<&Region> {
        self.regions.get(mr.0)
    }

    pub(crate) fn get_mut(&mut self, mr: MrId) -> Option<&mut Region> {
        self.regions.get_mut(mr.0)
    }

    pub(crate) fn key_in_use(&self, key: u32) -> bool {
        self.by_rkey.contains_key(&key) || self.regions.values().any(|r| r.info.lkey == key)
    }

    pub(crate) fn len(&self) -> usize {
        self.regions.len()
    }

    pub(crate) fn count_in_pd(&self, pd: PdId) -> usize {
        self.regions.values().filter(|r| r.pd == pd).count()
    }

    /// Resolves `len` bytes at remote address `va` under `rkey` for `need`.
    /// Zero-length accesses skip the key check, as IBA allows.
    pub(crate) fn resolve_remote(
        &self,
        pd: PdId,
        rkey: u32,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<Option<(MrId, u64)>, RemoteAccessFault> {
        if len == 0 {
            return Ok(None);
        }
        let id = *self.by_rkey.get(&rkey).ok_or(RemoteAccessFault::UnknownRkey)?;
        let region = self.regions.get(id.0).ok_or(RemoteAccessFault::UnknownRkey)?;
        if region.pd != pd {
            return Err(RemoteAccessFault::WrongPd);
        }
        if !region.info.access.contains(need) {
            return Err(RemoteAccessFault::NoPermission);
        }
        let start = va.checked_sub(region.info.addr).ok_or(RemoteAccessFault::OutOfBounds)?;
        let end = start.checked_add(len).ok_or(RemoteAccessFault::OutOfBounds)?;
        if end > region.info.len {
            return Err(RemoteAccessFault::OutOfBounds);
        }
        Ok(Some((id, start)))
    }

    /// Checks that every SGE names a region of `pd` and fits inside it.
    #[inline]
    pub(crate) fn check_sges(&self, pd: PdId, sges: &[Sge]) -> Result<(), LocalFault> {
        if let [sge] = sges {
            // One SGE, the usual case: checked without the loop.
            return self.check_sge(pd, sge);
        }
        sges.iter().try_for_each(|sge| self.check_sge(pd, sge))
    }

    #[inline]
    fn check_sge(&self, pd: PdId, sge: &Sge) -> Result<(), LocalFault> {
        let region = self.regions.get(sge.mr.0).ok_or(LocalFault::Protection)?;
        if region.pd != pd {
            return Err(LocalFault::Protection);
        }
        let end = sge.offset.checked_add(sge.len as u64).ok_or(LocalFault::Length)?;
        if end > region.info.len {
            return Err(LocalFault::Length);
        }
        Ok(())
    }

    /// Appends `len` bytes starting at byte `msg_offset` of the message the SGE
    /// list describes. SGEs must have been checked.
    #[inline]
    pub(crate) fn gather(&self, sges: &[Sge], mut msg_offset: u64, mut len: u64, out: &mut Vec<u8>) {
        if let [sge] = sges
            && msg_offset < sge.len as u64
            && let Some(region) = self.regions.get(sge.mr.0)
        {
            // One SGE, the usual case: its bytes straight, without the walk.
            let start = (sge.offset + msg_offset) as usize;
            let take = (sge.len as u64 - msg_offset).min(len) as usize;
            region.data.read_into(start, take, out);
            return;
        }
        for sge in sges {
            if len == 0 {
                break;
            }
            let sl = sge.len as u64;
            if msg_offset >= sl {
                msg_offset -= sl;
                continue;
            }
            let take = (sl - msg_offset).min(len);
            let Some(region) = self.regions.get(sge.mr.0) else { return };
            let start = (sge.offset + msg_offset) as usize;
            region.data.read_into(start, take as usize, out);
            len -= take;
            msg_offset = 0;
        }
    }

    /// Writes `data` at byte `msg_offset` of the message space the SGE list
    /// describes. Fails with `Length` when it does not fit.
    #[inline]
    pub(crate) fn scatter(&mut self, sges: &[Sge], mut msg_offset: u64, mut data: &[u8]) -> Result<(), LocalFault> {
        if let [sge] = sges
            && msg_offset < sge.len as u64
            && data.len() as u64 <= sge.len as u64 - msg_offset
            && let Some(region) = self.regions.get_mut(sge.mr.0)
        {
            // One SGE that takes all of `data`, the usual case: copied
            // straight, without the walk.
            let start = (sge.offset + msg_offset) as usize;
            region.data.write(start, data);
            return Ok(());
        }
        for sge in sges {
            if data.is_empty() {
                return Ok(());
            }
            let sl = sge.len as u64;
            if msg_offset >= sl {
                msg_offset -= sl;
                continue;
            }
            let take = ((sl - msg_offset) as usize).min(data.len());
            let region = self.regions.get_mut(sge.mr.0).ok_or(LocalFault::Protection)?;
            let start = (sge.offset + msg_offset) as usize;
            region.data.write(start, &data[..take]);
            data = &data[take..];
            msg_offset = 0;
        }
        if data.is_empty() { Ok(()) } else { Err(LocalFault::Length) }
    }

    /// Writes `data` at `offset` of region `mr` (already resolved and checked).
    pub(crate) fn write_resolved(&mut self, mr: MrId, offset: u64, data: &[u8]) {
        if let Some(region) = self.regions.get_mut(mr.0) {
            if let Some(pending) = &mut region.pending {
                pending.push((offset, data.to_vec()));
                return;
            }
            region.data.write(offset as usize, data);
        }
    }

    /// Appends `len` bytes at `offset` of region `mr` (already resolved).
    pub(crate) fn read_resolved(&self, mr: MrId, offset: u64, len: usize, out: &mut Vec<u8>) {
        if let Some(region) = self.regions.get(mr.0) {
            region.data.read_into(offset as usize, len, out);
        }
    }
}
