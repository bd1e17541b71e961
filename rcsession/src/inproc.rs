//! An in-process control plane: what the HTTP gateway does around the
//! manager, as direct calls, for tests, simulations and the selftest. The
//! "object backend" is the caller's bytes.

use rand_core::RngCore;

use super::manager::SessionManager;
use super::status::RcError;
use super::types::{PrepareReply, PrepareRequest};
use crate::hipobj::{Op, SessionId};
use crate::transport::Transport;

/// PREPARE of a GET with the object staged: prepare, take a stage slot,
/// borrow the staging buffer, copy `object` in, return the lease, publish.
/// Any failure after PREPARE aborts the session.
pub fn prepare_get<T: Transport, R: RngCore>(
    m: &mut SessionManager<T, R>,
    req: &PrepareRequest,
    object: &[u8],
    etag: &str,
) -> Result<PrepareReply, RcError> {
    prepare_get_versioned(m, req, object, etag, "")
}

/// [`prepare_get`] for a store with version ids: the reply's `version-id`.
pub fn prepare_get_versioned<T: Transport, R: RngCore>(
    m: &mut SessionManager<T, R>,
    req: &PrepareRequest,
    object: &[u8],
    etag: &str,
    version_id: &str,
) -> Result<PrepareReply, RcError> {
    if req.op != Op::Get {
        return Err(RcError::Arg { field: "op", rule: "prepare_get needs a GET" });
    }
    let reply = m.prepare(req)?;
    let id = reply.session;
    let staged = (|| {
        m.try_acquire_stage()?;
        let r = (|| {
            let lease = m.borrow_staging(&id)?;
            if let Err(e) = m.write_staging(&lease, 0, object) {
                let _ = m.finish_staging(lease, false, 0, "", "");
                return Err(e);
            }
            m.finish_staging(lease, true, object.len() as u64, etag, version_id)
        })();
        m.release_stage();
        r
    })();
    match staged.and_then(|()| m.finish_prepare(&id, true)) {
        Ok(()) => Ok(reply),
        Err(e) => {
            let _ = m.finish_prepare(&id, false);
            Err(e)
        }
    }
}

/// PREPARE of a PUT, published at once.
pub fn prepare_put<T: Transport, R: RngCore>(
    m: &mut SessionManager<T, R>,
    req: &PrepareRequest,
) -> Result<PrepareReply, RcError> {
    if req.op != Op::Put {
        return Err(RcError::Arg { field: "op", rule: "prepare_put needs a PUT" });
    }
    let reply = m.prepare(req)?;
    if let Err(e) = m.finish_prepare(&reply.session, true) {
        let _ = m.finish_prepare(&reply.session, false);
        return Err(e);
    }
    Ok(reply)
}

/// After a successful PUT READY: borrow the view, copy the object out,
/// commit it. Returns the object.
pub fn complete_put<T: Transport, R: RngCore>(
    m: &mut SessionManager<T, R>,
    id: &SessionId,
) -> Result<Vec<u8>, RcError> {
    let view = m.get_put_data(id)?;
    let mut data = vec![0u8; view.len as usize];
    let read = m.read_put_data(&view, 0, &mut data);
    m.finish_put(view, read.is_ok(), "etag", "")?;
    read.map(|()| data)
}

/// After a GET READY (or a failed PUT READY): the final response is sent.
pub fn complete_get<T: Transport, R: RngCore>(m: &mut SessionManager<T, R>, id: &SessionId) -> Result<(), RcError> {
    m.finish_final(id)
}
