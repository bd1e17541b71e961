//! What the target does with a command once its data is in: Fabrics
//! Connect, properties, Identify, features, Keep Alive, the discovery log,
//! and Read / Write / Flush on the in-memory namespaces.

use super::*;

impl NvmeTarget {
    /// Executes the command of `slot` (its inbound data in `data`).
    pub(super) fn execute<T: Transport>(
        &mut self,
        t: &mut T,
        key: u64,
        slot: usize,
        data: &[u8],
    ) -> Result<(), TargetError> {
        let (qid, cntlid, cmd) = {
            let q = &self.queues[&key];
            (q.qid, q.cntlid, q.slots[slot].cmd.expect("set before execute"))
        };
        let ok = Status::SUCCESS;
        let invalid_field = Status::new(SCT_GENERIC, SC_INVALID_FIELD, true);
        if let NvmeCommand::Connect { qid: cqid, sqsize, kato_ms, .. } = cmd {
            return self.connect(t, key, slot, cqid, sqsize, kato_ms, data);
        }
        let Some(cntlid) = cntlid else {
            // Nothing but Connect before Connect: command sequence error.
            return self.respond(t, key, slot, Status::new(SCT_GENERIC, 0x0C, true), 0);
        };
        let now = t.now();
        let Some(ctrl) = self.controllers.get_mut(&cntlid) else {
            return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_INTERNAL, true), 0);
        };
        // Any command counts as traffic for the keep-alive timer (TBKAS
        // aside, nvmet resets it on every command).
        ctrl.last_keep_alive = now;
        let ready = ctrl.ready_at.is_some_and(|r| now >= r) && ctrl.cc & CC_ENABLE != 0;
        match cmd {
            NvmeCommand::PropertyGet { size, offset } => {
                let value = match (offset, size) {
                    (REG_CAP, PropSize::Eight) => Cap::build(self.cfg.mqes, self.cfg.cap_to, 1 | 1 << 6, 0, 0).0,
                    (REG_VS, PropSize::Four) => 0x0001_0300,
                    (REG_CC, PropSize::Four) => ctrl.cc as u64,
                    (REG_CSTS, PropSize::Four) => {
                        let shst = if ctrl.cc & CC_SHN_NORMAL != 0 { CSTS_SHST_COMPLETE } else { 0 };
                        (ready as u32 | shst) as u64
                    }
                    _ => return self.respond(t, key, slot, invalid_field, 0),
                };
                self.respond(t, key, slot, ok, value)
            }
            NvmeCommand::PropertySet { size: PropSize::Four, offset: REG_CC, value } => {
                let value = value as u32;
                if value & CC_ENABLE != 0 && ctrl.cc & CC_ENABLE == 0 {
                    ctrl.ready_at = Some(now + self.cfg.ready_delay);
                } else if value & CC_ENABLE == 0 {
                    ctrl.ready_at = None;
                }
                ctrl.cc = value;
                self.respond(t, key, slot, ok, 0)
            }
            NvmeCommand::PropertySet { .. } => self.respond(t, key, slot, invalid_field, 0),
            _ if !ready => self.respond(t, key, slot, Status::new(SCT_GENERIC, 0x0C, true), 0),
            NvmeCommand::Identify { cns, nsid, sgl, .. } => {
                let subsystem = ctrl.subsystem;
                let bytes = match (cns, subsystem) {
                    (CNS_CONTROLLER, _) => Some(self.identify_controller(cntlid, subsystem).to_vec()),
                    (CNS_NAMESPACE, Some(s)) => self.subsystems[s]
                        .namespaces
                        .iter()
                        .find(|n| n.cfg.nsid == nsid)
                        .map(|n| identify_namespace(&n.cfg, &self.subsystems[s].nqn).to_vec()),
                    (CNS_NS_DESCRIPTORS, Some(s)) => self.subsystems[s]
                        .namespaces
                        .iter()
                        .find(|n| n.cfg.nsid == nsid)
                        .map(|n| ns_descriptors(&self.subsystems[s].nqn, n.cfg.nsid)),
                    (CNS_ACTIVE_NAMESPACES, Some(s)) => {
                        let mut list = vec![0u8; IDENTIFY_LEN];
                        let mut ids: Vec<u32> =
                            self.subsystems[s].namespaces.iter().map(|n| n.cfg.nsid).filter(|&id| id > nsid).collect();
                        ids.sort_unstable();
                        for (i, id) in ids.iter().take(1024).enumerate() {
                            list[4 * i..4 * i + 4].copy_from_slice(&id.to_le_bytes());
                        }
                        Some(list)
                    }
                    _ => return self.respond(t, key, slot, invalid_field, 0),
                };
                match bytes {
                    Some(b) => self.respond_with_data(t, key, slot, sgl, &b, 0),
                    None => self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_INVALID_NAMESPACE, true), 0),
                }
            }
            NvmeCommand::SetFeatures { fid: FEAT_NUMBER_OF_QUEUES, value, .. } => {
                let want = (value as u16).max((value >> 16) as u16).saturating_add(1);
                let got = want.min(self.cfg.max_io_queues);
                ctrl.io_queues = got;
                let n = (got - 1) as u64;
                self.respond(t, key, slot, ok, n | n << 16)
            }
            NvmeCommand::SetFeatures { fid: FEAT_KEEP_ALIVE_TIMER, value, .. } => {
                ctrl.kato = Duration::from_millis(value as u64);
                self.respond(t, key, slot, ok, 0)
            }
            NvmeCommand::GetFeatures { fid: FEAT_KEEP_ALIVE_TIMER, .. } => {
                let v = ctrl.kato.as_millis() as u64;
                self.respond(t, key, slot, ok, v)
            }
            NvmeCommand::SetFeatures { .. } | NvmeCommand::GetFeatures { .. } => {
                self.respond(t, key, slot, invalid_field, 0)
            }
            NvmeCommand::KeepAlive => {
                self.stats.keep_alives += 1;
                self.respond(t, key, slot, ok, 0)
            }
            NvmeCommand::AsyncEvent => {
                // Held, as nvmet holds AERs until an event happens.
                Ok(())
            }
            NvmeCommand::GetLogPage { lid: LID_DISCOVERY, len, offset, sgl, .. } if ctrl.subsystem.is_none() => {
                let page = self.discovery_log();
                let start = (offset as usize).min(page.len());
                let mut out = page[start..].to_vec();
                out.resize(len as usize, 0);
                self.respond_with_data(t, key, slot, sgl, &out, 0)
            }
            NvmeCommand::GetLogPage { .. } => self.respond(t, key, slot, invalid_field, 0),
            NvmeCommand::Read { nsid, slba, blocks, sgl } | NvmeCommand::Write { nsid, slba, blocks, sgl } => {
                let write = matches!(cmd, NvmeCommand::Write { .. });
                let subsystem = ctrl.subsystem;
                let armed =
                    self.stats.commands > self.faults.after_commands && self.stats.writes >= self.faults.after_writes;
                let random_error = armed && self.draw_random(key, slot);
                if (self.faults.error_io > 0 && armed) || random_error {
                    if random_error {
                        self.stats.random_errors += 1;
                    } else {
                        self.faults.error_io -= 1;
                    }
                    let sc = if self.faults.error_status == 0 { 0x06 } else { self.faults.error_status };
                    let status = Status::new(SCT_GENERIC, sc, true);
                    return self.respond(t, key, slot, status, 0);
                }
                let Some(s) = subsystem else {
                    return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_INVALID_OPCODE, true), 0);
                };
                let _ = qid;
                let max = self.cfg.max_transfer();
                let Some(ns) = self.subsystems[s].namespaces.iter_mut().find(|n| n.cfg.nsid == nsid) else {
                    return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_INVALID_NAMESPACE, true), 0);
                };
                let lba = ns.cfg.lba_size as u64;
                if slba.checked_add(blocks as u64).is_none_or(|end| end > ns.cfg.blocks) {
                    return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_LBA_OUT_OF_RANGE, true), 0);
                }
                let len = blocks as u64 * lba;
                if len > max {
                    return self.respond(t, key, slot, invalid_field, 0);
                }
                if sgl.len() as u64 != len {
                    return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_SGL_INVALID_DATA_LENGTH, true), 0);
                }
                let at = (slba * lba) as usize;
                if write {
                    for b in 0..blocks as u64 {
                        let off = at + (b * lba) as usize;
                        ns.undo.entry(slba + b).or_insert_with(|| ns.data[off..off + lba as usize].to_vec());
                    }
                    ns.data[at..at + len as usize].copy_from_slice(&data[..len as usize]);
                    self.stats.writes += 1;
                    self.stats.bytes_written += len;
                    if self.faults.disconnect_at_write != 0 && self.stats.writes == self.faults.disconnect_at_write {
                        self.disconnect_pending = true;
                    }
                    if self.faults.crash_at_write != 0 && self.stats.writes == self.faults.crash_at_write {
                        // Power fails before the response goes (run crashes
                        // the target once this pass is over).
                        self.crash_pending = true;
                        return Ok(());
                    }
                    self.respond(t, key, slot, ok, 0)
                } else {
                    let bytes = ns.data[at..at + len as usize].to_vec();
                    self.stats.reads += 1;
                    self.stats.bytes_read += len;
                    self.respond_with_data(t, key, slot, sgl, &bytes, 0)
                }
            }
            NvmeCommand::Flush { nsid } => {
                let Some(s) = ctrl.subsystem else {
                    return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_INVALID_OPCODE, true), 0);
                };
                let found = match self.make_durable(s, nsid) {
                    Ok(found) => found,
                    Err(e) => {
                        self.last_error.get_or_insert(e);
                        return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_INTERNAL, false), 0);
                    }
                };
                if !found {
                    return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_INVALID_NAMESPACE, true), 0);
                }
                self.stats.flushes += 1;
                self.respond(t, key, slot, ok, 0)
            }
            NvmeCommand::Connect { .. } | NvmeCommand::Disconnect => self.respond(t, key, slot, ok, 0),
        }
    }

    /// Draws this I/O command's random faults (three draws, whatever the
    /// rates, so each kind's picks stay put when another rate changes):
    /// keeps a drop or delay in the slot, returns whether it errs.
    fn draw_random(&mut self, key: u64, slot: usize) -> bool {
        if !self.random.any() {
            return false;
        }
        let r = self.random;
        let mut hit = |ppm: u32| self.rng.below(1_000_000) < ppm as u64;
        let (error, drop, delay) = (hit(r.error_ppm), hit(r.drop_ppm), hit(r.delay_ppm));
        if let Some(q) = self.queues.get_mut(&key) {
            q.slots[slot].pick = super::Pick { drop: drop && !error, delay: delay && !error };
        }
        error
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn connect<T: Transport>(
        &mut self,
        t: &mut T,
        key: u64,
        slot: usize,
        qid: u16,
        sqsize: u16,
        kato_ms: u32,
        data: &[u8],
    ) -> Result<(), TargetError> {
        let invalid = |offset: u16| {
            (
                Status::new(SCT_COMMAND_SPECIFIC, SC_CONNECT_INVALID_PARAMETERS, true),
                InvalidParameter::data_dw0(offset) as u64,
            )
        };
        let q = &self.queues[&key];
        if q.cntlid.is_some() {
            return self.respond(t, key, slot, Status::new(SCT_GENERIC, 0x0C, true), 0);
        }
        if qid != q.qid {
            return self.respond(
                t,
                key,
                slot,
                Status::new(SCT_COMMAND_SPECIFIC, SC_CONNECT_INVALID_PARAMETERS, true),
                42,
            );
        }
        if sqsize == 0 || sqsize >= q.depth {
            return self.respond(
                t,
                key,
                slot,
                Status::new(SCT_COMMAND_SPECIFIC, SC_CONNECT_INVALID_PARAMETERS, true),
                44,
            );
        }
        let d = match ConnectData::decode(data) {
            Ok(d) => d,
            Err(ProtocolError::Field { field: "subnqn", .. }) => {
                let (s, r) = invalid(256);
                return self.respond(t, key, slot, s, r);
            }
            Err(_) => {
                let (s, r) = invalid(512);
                return self.respond(t, key, slot, s, r);
            }
        };
        let subsystem = if d.subnqn.as_str() == DISCOVERY_NQN && self.cfg.discovery {
            None
        } else {
            match self.subsystems.iter().position(|s| s.nqn == d.subnqn.as_str()) {
                Some(i) => Some(i),
                None => {
                    let (s, r) = invalid(256);
                    return self.respond(t, key, slot, s, r);
                }
            }
        };
        let now = t.now();
        let cntlid = if qid == 0 {
            if d.cntlid != CNTLID_DYNAMIC {
                let (s, r) = invalid(16);
                return self.respond(t, key, slot, s, r);
            }
            let c = self.next_cntlid;
            self.next_cntlid = self.next_cntlid % 0xFFEF + 1;
            self.controllers.insert(
                c,
                Controller {
                    subsystem,
                    cc: 0,
                    ready_at: None,
                    kato: Duration::from_millis(kato_ms as u64),
                    last_keep_alive: now,
                    io_queues: 0,
                },
            );
            c
        } else {
            let Some(c) = self.controllers.get(&d.cntlid) else {
                let (s, r) = invalid(16);
                return self.respond(t, key, slot, s, r);
            };
            if c.subsystem != subsystem {
                let (s, r) = invalid(256);
                return self.respond(t, key, slot, s, r);
            }
            if qid > c.io_queues {
                return self.respond(
                    t,
                    key,
                    slot,
                    Status::new(SCT_COMMAND_SPECIFIC, SC_CONNECT_INVALID_PARAMETERS, true),
                    42,
                );
            }
            d.cntlid
        };
        self.queues.get_mut(&key).expect("present").cntlid = Some(cntlid);
        let auth = if self.cfg.require_auth { 1u64 << 17 } else { 0 };
        self.respond(t, key, slot, Status::SUCCESS, cntlid as u64 | auth)
    }

    pub(super) fn identify_controller(&self, cntlid: u16, subsystem: Option<usize>) -> Box<[u8; IDENTIFY_LEN]> {
        let discovery = subsystem.is_none();
        let mut b = ControllerInfo {
            vid: 0,
            serial: format!("rctbsim{:04x}", cntlid),
            model: "rctb simulated target".into(),
            firmware: "rctb-0.1".into(),
            mdts: if discovery { 0 } else { self.cfg.mdts },
            cntlid,
            version: 0x0001_0300,
            cntrltype: if discovery { CNTRLTYPE_DISCOVERY } else { CNTRLTYPE_IO },
            kas: self.cfg.kas,
            maxcmd: self.cfg.maxcmd,
            nn: subsystem.map_or(0, |s| self.subsystems[s].namespaces.iter().map(|n| n.cfg.nsid).max().unwrap_or(0)),
            sgls: SGLS_SUPPORTED | SGLS_KEYED | SGLS_OFFSET,
            subnqn: subsystem.map_or(DISCOVERY_NQN.to_string(), |s| self.subsystems[s].nqn.clone()),
            ioccsz: if discovery { 0 } else { self.cfg.ioccsz },
            iorcsz: if discovery { 0 } else { 1 },
            icdoff: 0,
            fcatt: 0,
            msdbd: 1,
        }
        .encode();
        // VWC (byte 525, bit 0): writes wait in a volatile cache until a
        // Flush (a crash loses them), so a host must flush for durability.
        if !discovery {
            b[525] |= 1;
        }
        b
    }

    pub(super) fn discovery_log(&self) -> Vec<u8> {
        let entry = |subtype, nqn: &str| DiscoveryEntry {
            trtype: TRTYPE_RDMA,
            adrfam: ADRFAM_IPV4,
            subtype,
            treq: 0,
            portid: 1,
            cntlid: CNTLID_DYNAMIC,
            asqsz: ADMIN_QUEUE_DEPTH,
            eflags: 0,
            trsvcid: self.cfg.port.to_string(),
            subnqn: nqn.into(),
            traddr: self.ip.to_string(),
            rdma_qptype: 1,
            rdma_prtype: 1,
            rdma_cms: 1,
            rdma_pkey: 0,
        };
        let mut entries = vec![entry(SUBTYPE_CURRENT_DISCOVERY, DISCOVERY_NQN)];
        entries.extend(self.subsystems.iter().map(|s| entry(SUBTYPE_NVME, &s.nqn)));
        DiscoveryLog { header: DiscoveryLogHeader { genctr: 1, numrec: entries.len() as u64, recfmt: 0 }, entries }
            .encode()
    }
}

/// A namespace's NGUID: the same for the same subsystem NQN and NSID
/// (FNV-1a over both, twice), as stable as nvmet's configured one.
fn nguid(nqn: &str, nsid: u32) -> [u8; 16] {
    use rctb_transport::seed::{FNV1A_OFFSET, fnv1a_extend};
    let fnv = |basis: u64| fnv1a_extend(fnv1a_extend(basis, nqn.as_bytes()), &nsid.to_le_bytes());
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&fnv(FNV1A_OFFSET).to_be_bytes());
    id[8..].copy_from_slice(&fnv(0x6c62_272e_07bb_0142).to_be_bytes());
    id
}

/// Identify CNS 03h, as nvmet answers it: the NGUID (NIDT 2, NIDL 16),
/// then the command set (NIDT 4, NIDL 1: 0, NVM), which a host that
/// enabled command set selection (CC.CSS = 110b) insists on; then zeroes.
fn ns_descriptors(nqn: &str, nsid: u32) -> Vec<u8> {
    let mut list = vec![0u8; IDENTIFY_LEN];
    list[0] = 0x02;
    list[1] = 16;
    list[4..20].copy_from_slice(&nguid(nqn, nsid));
    list[20] = 0x04;
    list[21] = 1;
    list[24] = 0; // CSI 0: the NVM command set
    list
}

fn identify_namespace(n: &NamespaceConfig, nqn: &str) -> Box<[u8; IDENTIFY_LEN]> {
    let mut b = identify_namespace_fields(n);
    // NGUID (bytes 104..120), the one the descriptor list gives.
    b[104..120].copy_from_slice(&nguid(nqn, n.nsid));
    b
}

fn identify_namespace_fields(n: &NamespaceConfig) -> Box<[u8; IDENTIFY_LEN]> {
    NamespaceInfo {
        nsid: n.nsid,
        nsze: n.blocks,
        ncap: n.blocks,
        nuse: n.blocks,
        nsfeat: 0,
        flbas: 0,
        formats: vec![LbaFormat { ms: 0, lbads: n.lba_size.trailing_zeros() as u8, rp: 0 }],
    }
    .encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_io_controller_says_it_has_a_volatile_write_cache() {
        let t = NvmeTarget::new(TargetConfig::new("nqn.2026-01.io.rctb:target"), "10.0.0.2".parse().unwrap()).unwrap();
        assert_eq!(t.identify_controller(1, Some(0))[525] & 1, 1, "an I/O controller: VWC");
        assert_eq!(t.identify_controller(1, None)[525] & 1, 0, "the discovery controller: none");
    }

    #[test]
    fn the_descriptor_list_and_identify_namespace_give_one_stable_nguid_per_namespace() {
        let ns = NamespaceConfig { nsid: 2, lba_size: 4096, blocks: 1024 };
        let list = ns_descriptors("nqn.2026-01.io.rctb:target", 2);
        // NIDT 2 (NGUID), NIDL 16; NIDT 4 (CSI), NIDL 1, NVM; then zeroes.
        assert_eq!((list.len(), list[0], list[1]), (IDENTIFY_LEN, 2, 16));
        assert_eq!(list[20..25], [4, 1, 0, 0, 0]);
        assert!(list[25..].iter().all(|&b| b == 0));
        let id = identify_namespace(&ns, "nqn.2026-01.io.rctb:target");
        assert_eq!(id[104..120], list[4..20]);
        assert_ne!(list[4..20], [0; 16]);
        assert_eq!(ns_descriptors("nqn.2026-01.io.rctb:target", 2), list, "stable");
        assert_ne!(ns_descriptors("nqn.2026-01.io.rctb:target", 1)[4..20], list[4..20], "one per namespace");
        assert_ne!(ns_descriptors("nqn.other", 2)[4..20], list[4..20], "one per subsystem");
        // The rest of Identify Namespace reads back as before.
        let info = NamespaceInfo::decode(2, &id[..]).unwrap();
        assert_eq!((info.nsze, info.formats[0].lbads), (1024, 12));
    }
}
