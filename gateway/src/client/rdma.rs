//! The RDMA side of the gateway client: [`RdmaPort`] (what a transfer
//! needs of an `RcClient`), jobs on an [`RdmaRunner`], and [`RdmaThread`],
//! which owns a port on a thread of its own so that its transport need not
//! be `Send`.

use super::*;

/// The RDMA side of a transfer, as jobs on the thread that owns it.
pub trait RdmaPort {
    /// The largest object the region holds.
    fn capacity(&self) -> u64;
    /// A fresh QP and the PREPARE request (token: our QPN, GID, region).
    fn begin(
        &mut self,
        principal: PrincipalId,
        op: Op,
        target: &str,
        size: u64,
        psn: u32,
        cookie: u32,
    ) -> Result<(ClientTransfer, PrepareRequest), ObjectError>;
    /// Copies `data` into the client's staging buffer at `offset` (a PUT's source).
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<(), ObjectError>;
    /// Copies the staging buffer at `offset` into `buf` (a GET's result).
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), ObjectError>;
    /// Connects our QP to the server's (GET: posts the receive).
    fn connect(&mut self, xfer: &mut ClientTransfer, reply: &PrepareReply) -> Result<ReadyRequest, ObjectError>;
    /// PUT: posts the WRITE with immediate (READY is on its way).
    fn start_put(&mut self, xfer: &mut ClientTransfer) -> Result<(), ObjectError>;
    /// BUSY: reconnect (GET: re-post the receive) for another READY.
    fn on_busy(&mut self, xfer: &mut ClientTransfer) -> Result<ReadyRequest, ObjectError>;
    /// GET: waits (transport time) for the cookie's receive completion.
    fn wait_get(&mut self, xfer: &mut ClientTransfer, timeout: StdDuration) -> Result<(), ObjectError>;
    /// Stops our QP after a failure.
    fn abandon(&mut self, xfer: &mut ClientTransfer);
}

impl<T: Transport> RdmaPort for RcClient<T> {
    fn capacity(&self) -> u64 {
        self.region().len
    }

    fn begin(
        &mut self,
        principal: PrincipalId,
        op: Op,
        target: &str,
        size: u64,
        psn: u32,
        cookie: u32,
    ) -> Result<(ClientTransfer, PrepareRequest), ObjectError> {
        Ok(RcClient::begin(self, principal, op, target, size, psn, cookie)?)
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<(), ObjectError> {
        let mr = self.region().id;
        self.transport_mut().mr_write(mr, offset, data).map_err(ClientError::from)?;
        Ok(())
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), ObjectError> {
        let mr = self.region().id;
        self.transport().mr_read(mr, offset, buf).map_err(ClientError::from)?;
        Ok(())
    }

    fn connect(&mut self, xfer: &mut ClientTransfer, reply: &PrepareReply) -> Result<ReadyRequest, ObjectError> {
        Ok(RcClient::connect(self, xfer, reply, true)?)
    }

    fn start_put(&mut self, xfer: &mut ClientTransfer) -> Result<(), ObjectError> {
        Ok(RcClient::start_put(self, xfer)?)
    }

    fn on_busy(&mut self, xfer: &mut ClientTransfer) -> Result<ReadyRequest, ObjectError> {
        Ok(RcClient::on_busy(self, xfer)?)
    }

    fn wait_get(&mut self, xfer: &mut ClientTransfer, timeout: StdDuration) -> Result<(), ObjectError> {
        let deadline = self.transport().now() + timeout;
        loop {
            if self.poll(xfer)?.is_some() {
                return Ok(());
            }
            if self.transport().now() >= deadline {
                return Err(ObjectError::DataTimeout(timeout));
            }
            let cq = self.cq();
            self.transport_mut().wait(&[cq], deadline).map_err(ClientError::from)?;
        }
    }

    fn abandon(&mut self, xfer: &mut ClientTransfer) {
        let _ = RcClient::abandon(self, xfer);
    }
}

/// A job on an [`RdmaPort`].
pub type RdmaJob = Box<dyn FnOnce(&mut dyn RdmaPort) + Send>;

/// Runs jobs on the thread that owns an [`RdmaPort`].
pub trait RdmaRunner: Send + Sync + fmt::Debug {
    /// Queues `job` for that thread.
    fn submit(&self, job: RdmaJob) -> Result<(), ObjectError>;
}

/// An [`RdmaPort`] on a thread of its own.
#[derive(Debug)]
pub struct RdmaThread {
    tx: Mutex<mpsc::Sender<RdmaJob>>,
}

impl RdmaThread {
    /// Starts the thread; `make` builds the port there.
    pub fn spawn<P, F>(make: F) -> Result<Self, ObjectError>
    where
        P: RdmaPort + 'static,
        F: FnOnce() -> Result<P, ObjectError> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel::<RdmaJob>();
        let (ok_tx, ok_rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("rc-client".into())
            .spawn(move || {
                let mut port = match make() {
                    Ok(p) => {
                        let _ = ok_tx.send(Ok(()));
                        p
                    }
                    Err(e) => {
                        let _ = ok_tx.send(Err(e));
                        return;
                    }
                };
                while let Ok(job) = rx.recv() {
                    job(&mut port);
                }
            })
            .map_err(|e| ObjectError::Transport(format!("spawning the RDMA thread: {e}")))?;
        ok_rx.recv().map_err(|_| ObjectError::Stopped)??;
        Ok(RdmaThread { tx: Mutex::new(tx) })
    }

    /// An `RcClient` on `make()`'s transport.
    pub fn rc_client<T, F>(make: F, cfg: ClientConfig) -> Result<Self, ObjectError>
    where
        T: Transport + 'static,
        F: FnOnce() -> Result<T, ObjectError> + Send + 'static,
    {
        Self::spawn(move || Ok(RcClient::new(make()?, cfg)?))
    }
}

impl RdmaRunner for RdmaThread {
    fn submit(&self, job: RdmaJob) -> Result<(), ObjectError> {
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).send(job).map_err(|_| ObjectError::Stopped)
    }
}
