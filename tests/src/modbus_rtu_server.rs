//! A real Modbus RTU server on a pseudo-terminal, for the serial mapper's tests: `tokio-modbus`'s
//! RTU server (its own framing and CRC, independent of the guest's) serves the master side of a
//! pty pair, and a mapper opens the slave side by its path (`/dev/pts/N`) as it would open
//! `/dev/ttyUSB0`. Several slave ids answer on the one line, as on an RS-485 bus; an id with no
//! memory stays silent, as an absent slave does.

use std::collections::HashMap;
use std::future;
use std::sync::{Arc, Mutex};

use tokio_modbus::prelude::{ExceptionCode, Response, SlaveRequest};
use tokio_modbus::server::Service;
use tokio_modbus::server::rtu::Server;
use tokio_serial::{SerialPort, SerialStream};

use crate::modbus_server::{Registers, answer};

/// The slaves on the line, by id.
type Slaves = Arc<Mutex<HashMap<u8, Registers>>>;

#[derive(Clone)]
struct Line {
    slaves: Slaves,
    /// Requests addressed to an id nobody answers.
    unanswered: Arc<Mutex<u64>>,
}

impl Service for Line {
    type Request = SlaveRequest<'static>;
    /// `None`: no slave has the id, so nothing is sent back.
    type Response = Option<Response>;
    type Exception = ExceptionCode;
    type Future = future::Ready<Result<Option<Response>, ExceptionCode>>;

    fn call(&self, req: SlaveRequest<'static>) -> Self::Future {
        let mut slaves = self.slaves.lock().unwrap_or_else(|e| e.into_inner());
        let answered = match slaves.get_mut(&req.slave) {
            Some(memory) => answer(memory, req.request).map(Some),
            None => {
                *self.unanswered.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                Ok(None)
            }
        };
        future::ready(answered)
    }
}

/// A running RTU line; the server stops and the pty closes when dropped.
pub struct RtuServer {
    /// The device path a mapper opens, e.g. `/dev/pts/5`.
    pub path: String,
    slaves: Slaves,
    unanswered: Arc<Mutex<u64>>,
    /// Our own handle on the slave side: while one is open the line stays up even when the
    /// mapper closes its port (the last close would hang the master side up).
    _slave_side: SerialStream,
    task: tokio::task::JoinHandle<()>,
}

impl RtuServer {
    /// Opens a pty pair and serves `slaves` (id, memory) on it. Call it inside a tokio runtime
    /// (the server is a task on it).
    pub fn start(slaves: impl IntoIterator<Item = (u8, Registers)>) -> RtuServer {
        // `pair` neither sets TIOCEXCL nor takes a lock on the slave side, so the mapper can
        // open it by path. (Not `set_exclusive(false)`: that takes a shared `flock`, and the
        // host's exclusive lock would find the port busy.)
        let (master, slave_side) =
            SerialStream::pair().expect("open a pseudo-terminal pair for the Modbus RTU server");
        let path = slave_side.name().expect("the pty's slave side has a path");
        let slaves: Slaves = Arc::new(Mutex::new(slaves.into_iter().collect()));
        let unanswered = Arc::new(Mutex::new(0));
        let line = Line {
            slaves: slaves.clone(),
            unanswered: unanswered.clone(),
        };
        let task = tokio::spawn(async move {
            let _ = Server::new(master).serve_forever(line).await;
        });
        RtuServer {
            path,
            slaves,
            unanswered,
            _slave_side: slave_side,
            task,
        }
    }

    /// Reads or changes the memory of slave `id` (which must be on the line).
    pub fn with<R>(&self, id: u8, f: impl FnOnce(&mut Registers) -> R) -> R {
        let mut slaves = self.slaves.lock().unwrap_or_else(|e| e.into_inner());
        let memory = slaves
            .get_mut(&id)
            .unwrap_or_else(|| panic!("no slave {id} on the line"));
        f(memory)
    }

    /// Puts slave `id` on the line (again) with `memory`: from now on it answers.
    pub fn add_slave(&self, id: u8, memory: Registers) {
        let mut slaves = self.slaves.lock().unwrap_or_else(|e| e.into_inner());
        slaves.insert(id, memory);
    }

    /// How many requests named an id no slave on the line has.
    pub fn unanswered(&self) -> u64 {
        *self.unanswered.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for RtuServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
