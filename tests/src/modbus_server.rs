//! A real Modbus TCP server for mapper tests, built on `tokio-modbus` — an implementation
//! independent of the guest's own framing, so a test proves interoperability, not symmetry.
//! Its device logic ([`answer`]) also serves the RTU server of [`crate::modbus_rtu_server`].

use std::collections::HashMap;
use std::future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio_modbus::prelude::{ExceptionCode, Request, Response};
use tokio_modbus::server::Service;
use tokio_modbus::server::tcp::{Server, accept_tcp_connection};

/// The device's memory: register and bit tables by address.
#[derive(Debug, Default)]
pub struct Registers {
    /// Holding registers (read/write).
    pub holding: HashMap<u16, u16>,
    /// Input registers (read-only).
    pub input: HashMap<u16, u16>,
    /// Coils (read/write bits).
    pub coils: HashMap<u16, bool>,
    /// Discrete inputs (read-only bits).
    pub discrete: HashMap<u16, bool>,
    /// Requests served.
    pub requests: u64,
}

#[derive(Clone)]
struct Device {
    registers: Arc<Mutex<Registers>>,
}

fn words(map: &HashMap<u16, u16>, start: u16, count: u16) -> Result<Vec<u16>, ExceptionCode> {
    (start..start.saturating_add(count))
        .map(|a| {
            map.get(&a)
                .copied()
                .ok_or(ExceptionCode::IllegalDataAddress)
        })
        .collect()
}

fn bits(map: &HashMap<u16, bool>, start: u16, count: u16) -> Result<Vec<bool>, ExceptionCode> {
    (start..start.saturating_add(count))
        .map(|a| {
            map.get(&a)
                .copied()
                .ok_or(ExceptionCode::IllegalDataAddress)
        })
        .collect()
}

/// Answers one request from `memory`, as a device with that memory would: reads of absent
/// addresses and writes to absent or read-only addresses are `IllegalDataAddress`. Shared by
/// the TCP server here and the RTU server in [`crate::modbus_rtu_server`].
pub fn answer(memory: &mut Registers, req: Request<'_>) -> Result<Response, ExceptionCode> {
    let r = memory;
    r.requests += 1;
    match req {
        Request::ReadHoldingRegisters(a, n) => {
            words(&r.holding, a, n).map(Response::ReadHoldingRegisters)
        }
        Request::ReadInputRegisters(a, n) => {
            words(&r.input, a, n).map(Response::ReadInputRegisters)
        }
        Request::ReadCoils(a, n) => bits(&r.coils, a, n).map(Response::ReadCoils),
        Request::ReadDiscreteInputs(a, n) => {
            bits(&r.discrete, a, n).map(Response::ReadDiscreteInputs)
        }
        Request::WriteSingleRegister(a, v) if r.holding.contains_key(&a) => {
            r.holding.insert(a, v);
            Ok(Response::WriteSingleRegister(a, v))
        }
        Request::WriteMultipleRegisters(a, values)
            if (a..a + values.len() as u16).all(|x| r.holding.contains_key(&x)) =>
        {
            for (i, v) in values.iter().enumerate() {
                r.holding.insert(a + i as u16, *v);
            }
            Ok(Response::WriteMultipleRegisters(a, values.len() as u16))
        }
        Request::WriteSingleCoil(a, v) if r.coils.contains_key(&a) => {
            r.coils.insert(a, v);
            Ok(Response::WriteSingleCoil(a, v))
        }
        _ => Err(ExceptionCode::IllegalDataAddress),
    }
}

/// The TCP server's one device, whatever unit id a request names.
impl Service for Device {
    type Request = Request<'static>;
    type Response = Response;
    type Exception = ExceptionCode;
    type Future = future::Ready<Result<Response, ExceptionCode>>;

    fn call(&self, req: Request<'static>) -> Self::Future {
        let mut memory = self.registers.lock().unwrap_or_else(|e| e.into_inner());
        future::ready(answer(&mut memory, req))
    }
}

/// A running server; stops when dropped.
pub struct ModbusServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its memory, shared with the test.
    pub registers: Arc<Mutex<Registers>>,
    task: tokio::task::JoinHandle<()>,
}

impl ModbusServer {
    /// Starts a server on a free loopback port with the given memory.
    pub async fn start(registers: Registers) -> ModbusServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port for the Modbus server");
        let addr = listener.local_addr().expect("local addr");
        let registers = Arc::new(Mutex::new(registers));
        let device = Device {
            registers: registers.clone(),
        };
        let task = tokio::spawn(async move {
            let server = Server::new(listener);
            let new_service = move |_peer| Ok(Some(device.clone()));
            let on_connected = |stream, peer| {
                let new_service = new_service.clone();
                async move { accept_tcp_connection(stream, peer, new_service) }
            };
            let _ = server.serve(&on_connected, |_err| {}).await;
        });
        ModbusServer {
            addr,
            registers,
            task,
        }
    }

    /// Reads the memory.
    pub fn with<R>(&self, f: impl FnOnce(&mut Registers) -> R) -> R {
        f(&mut self.registers.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Drop for ModbusServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
