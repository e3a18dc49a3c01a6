//! The Modbus application layer: requests, their PDUs (function code and data, big-endian),
//! the validation of answers against the request, and exceptions — everything that is the same
//! whichever transport carries it (MBAP over TCP, RTU over a serial line).
//!
//! Plain Rust with no host calls, so it is unit-tested on the host:
//! `cargo test -p modbus-core --target x86_64-unknown-linux-gnu` (in `modules/`).

use std::fmt;
use std::io;

/// Most coils or discrete inputs one read may ask for.
pub const MAX_READ_BITS: u16 = 2000;
/// Most registers one read may ask for.
pub const MAX_READ_REGISTERS: u16 = 125;
/// Most registers one "write multiple registers" may carry.
pub const MAX_WRITE_REGISTERS: u16 = 123;
/// Largest PDU: what a serial line ADU of 256 bytes leaves after the address and CRC (3
/// bytes), and a TCP ADU of 260 bytes after the 7-byte MBAP header.
pub const MAX_PDU_LEN: usize = 253;

/// Function codes.
pub mod function {
    /// 01 Read Coils.
    pub const READ_COILS: u8 = 0x01;
    /// 02 Read Discrete Inputs.
    pub const READ_DISCRETE_INPUTS: u8 = 0x02;
    /// 03 Read Holding Registers.
    pub const READ_HOLDING_REGISTERS: u8 = 0x03;
    /// 04 Read Input Registers.
    pub const READ_INPUT_REGISTERS: u8 = 0x04;
    /// 05 Write Single Coil.
    pub const WRITE_SINGLE_COIL: u8 = 0x05;
    /// 06 Write Single Register.
    pub const WRITE_SINGLE_REGISTER: u8 = 0x06;
    /// 16 Write Multiple Registers.
    pub const WRITE_MULTIPLE_REGISTERS: u8 = 0x10;
}

/// One Modbus request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// 01: `count` coils from `address`.
    ReadCoils { address: u16, count: u16 },
    /// 02: `count` discrete inputs from `address`.
    ReadDiscreteInputs { address: u16, count: u16 },
    /// 03: `count` holding registers from `address`.
    ReadHoldingRegisters { address: u16, count: u16 },
    /// 04: `count` input registers from `address`.
    ReadInputRegisters { address: u16, count: u16 },
    /// 05: one coil.
    WriteSingleCoil { address: u16, value: bool },
    /// 06: one holding register.
    WriteSingleRegister { address: u16, value: u16 },
    /// 16: consecutive holding registers from `address`.
    WriteMultipleRegisters { address: u16, values: Vec<u16> },
}

/// A decoded, validated response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// Answer to 01 / 02: exactly the requested number of bits.
    Bits(Vec<bool>),
    /// Answer to 03 / 04: exactly the requested number of registers.
    Registers(Vec<u16>),
    /// Answer to 05 / 06 / 16: the device confirmed the write.
    Written,
}

/// What can go wrong in one transaction.
#[derive(Debug)]
pub enum Error {
    /// The request cannot be sent as it is (count out of range, address overflow).
    InvalidRequest(String),
    /// The stream failed (including timeouts and a closed connection).
    Io(io::Error),
    /// The peer sent something that is not a valid answer to the request.
    Protocol(String),
    /// The device answered with an exception response.
    Exception {
        /// Function code of the request.
        function: u8,
        /// Exception code.
        code: u8,
    },
}

impl Error {
    /// Whether the connection can no longer be trusted (an I/O or framing failure): the caller
    /// should drop it and reconnect on the next call. Exceptions and invalid requests leave the
    /// connection usable.
    pub fn breaks_connection(&self) -> bool {
        matches!(self, Error::Io(_) | Error::Protocol(_))
    }
}

/// The standard name of an exception code.
pub fn exception_name(code: u8) -> &'static str {
    match code {
        0x01 => "illegal function",
        0x02 => "illegal data address",
        0x03 => "illegal data value",
        0x04 => "server device failure",
        0x05 => "acknowledge",
        0x06 => "server device busy",
        0x08 => "memory parity error",
        0x0A => "gateway path unavailable",
        0x0B => "gateway target device failed to respond",
        _ => "unknown exception",
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidRequest(m) => write!(f, "invalid request: {m}"),
            Error::Io(e) => write!(f, "i/o error: {e}"),
            Error::Protocol(m) => write!(f, "protocol error: {m}"),
            Error::Exception { function, code } => write!(
                f,
                "modbus exception {code:#04x} ({}) for function {function:#04x}",
                exception_name(*code)
            ),
        }
    }
}

impl std::error::Error for Error {}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

impl Request {
    /// The request's function code.
    pub fn function(&self) -> u8 {
        match self {
            Request::ReadCoils { .. } => function::READ_COILS,
            Request::ReadDiscreteInputs { .. } => function::READ_DISCRETE_INPUTS,
            Request::ReadHoldingRegisters { .. } => function::READ_HOLDING_REGISTERS,
            Request::ReadInputRegisters { .. } => function::READ_INPUT_REGISTERS,
            Request::WriteSingleCoil { .. } => function::WRITE_SINGLE_COIL,
            Request::WriteSingleRegister { .. } => function::WRITE_SINGLE_REGISTER,
            Request::WriteMultipleRegisters { .. } => function::WRITE_MULTIPLE_REGISTERS,
        }
    }

    /// Checks counts and address ranges against the protocol's limits.
    pub fn validate(&self) -> Result<(), Error> {
        let check = |address: u16, count: usize, max: u16| {
            if count == 0 || count > usize::from(max) {
                return Err(Error::InvalidRequest(format!(
                    "quantity {count} is outside 1..={max}"
                )));
            }
            if usize::from(address) + count > 0x1_0000 {
                return Err(Error::InvalidRequest(format!(
                    "address {address} + quantity {count} runs past 65535"
                )));
            }
            Ok(())
        };
        match self {
            Request::ReadCoils { address, count }
            | Request::ReadDiscreteInputs { address, count } => {
                check(*address, usize::from(*count), MAX_READ_BITS)
            }
            Request::ReadHoldingRegisters { address, count }
            | Request::ReadInputRegisters { address, count } => {
                check(*address, usize::from(*count), MAX_READ_REGISTERS)
            }
            Request::WriteSingleCoil { .. } | Request::WriteSingleRegister { .. } => Ok(()),
            Request::WriteMultipleRegisters { address, values } => {
                check(*address, values.len(), MAX_WRITE_REGISTERS)
            }
        }
    }

    /// The PDU: function code and data.
    pub fn encode_pdu(&self) -> Vec<u8> {
        let mut pdu = vec![self.function()];
        match self {
            Request::ReadCoils { address, count }
            | Request::ReadDiscreteInputs { address, count }
            | Request::ReadHoldingRegisters { address, count }
            | Request::ReadInputRegisters { address, count } => {
                pdu.extend_from_slice(&address.to_be_bytes());
                pdu.extend_from_slice(&count.to_be_bytes());
            }
            Request::WriteSingleCoil { address, value } => {
                pdu.extend_from_slice(&address.to_be_bytes());
                pdu.extend_from_slice(if *value { &[0xFF, 0x00] } else { &[0x00, 0x00] });
            }
            Request::WriteSingleRegister { address, value } => {
                pdu.extend_from_slice(&address.to_be_bytes());
                pdu.extend_from_slice(&value.to_be_bytes());
            }
            Request::WriteMultipleRegisters { address, values } => {
                pdu.extend_from_slice(&address.to_be_bytes());
                pdu.extend_from_slice(&(values.len() as u16).to_be_bytes());
                pdu.push((values.len() * 2) as u8);
                for v in values {
                    pdu.extend_from_slice(&v.to_be_bytes());
                }
            }
        }
        pdu
    }

    /// The length of the PDU of a normal (not exception) answer to this request: what a
    /// transport without a length field (a serial line) must read.
    pub fn response_pdu_len(&self) -> usize {
        match self {
            Request::ReadCoils { count, .. } | Request::ReadDiscreteInputs { count, .. } => {
                2 + usize::from(*count).div_ceil(8)
            }
            Request::ReadHoldingRegisters { count, .. }
            | Request::ReadInputRegisters { count, .. } => 2 + 2 * usize::from(*count),
            Request::WriteSingleCoil { .. }
            | Request::WriteSingleRegister { .. }
            | Request::WriteMultipleRegisters { .. } => 5,
        }
    }
}

/// Decodes the PDU that answers `request`, checking it against the request.
pub fn decode_pdu(request: &Request, pdu: &[u8]) -> Result<Response, Error> {
    let expected = request.function();
    let Some(&function) = pdu.first() else {
        return Err(Error::Protocol("empty PDU".to_string()));
    };
    if function == expected | 0x80 {
        return match pdu {
            [_, code] => Err(Error::Exception {
                function: expected,
                code: *code,
            }),
            _ => Err(Error::Protocol(format!(
                "exception response of {} bytes, not 2",
                pdu.len()
            ))),
        };
    }
    if function != expected {
        return Err(Error::Protocol(format!(
            "function code {function:#04x} in the answer to {expected:#04x}"
        )));
    }
    let data = &pdu[1..];
    match request {
        Request::ReadCoils { count, .. } | Request::ReadDiscreteInputs { count, .. } => {
            let count = usize::from(*count);
            let bytes = count.div_ceil(8);
            let bits = counted(data, bytes)?;
            Ok(Response::Bits(
                (0..count)
                    .map(|i| bits[i / 8] & (1 << (i % 8)) != 0)
                    .collect(),
            ))
        }
        Request::ReadHoldingRegisters { count, .. } | Request::ReadInputRegisters { count, .. } => {
            let regs = counted(data, usize::from(*count) * 2)?;
            Ok(Response::Registers(
                regs.chunks_exact(2)
                    .map(|w| u16::from_be_bytes([w[0], w[1]]))
                    .collect(),
            ))
        }
        Request::WriteSingleCoil { .. } | Request::WriteSingleRegister { .. } => {
            let sent = request.encode_pdu();
            if pdu != sent.as_slice() {
                return Err(Error::Protocol(format!(
                    "write echo {pdu:02x?} differs from the request {sent:02x?}"
                )));
            }
            Ok(Response::Written)
        }
        Request::WriteMultipleRegisters { address, values } => {
            let mut echo = address.to_be_bytes().to_vec();
            echo.extend_from_slice(&(values.len() as u16).to_be_bytes());
            if data != echo.as_slice() {
                return Err(Error::Protocol(format!(
                    "write echo {data:02x?} differs from {echo:02x?}"
                )));
            }
            Ok(Response::Written)
        }
    }
}

/// The data after a byte-count prefix, which must be exactly `expected` bytes long.
fn counted(data: &[u8], expected: usize) -> Result<&[u8], Error> {
    match data.split_first() {
        Some((&n, rest)) if usize::from(n) == expected && rest.len() == expected => Ok(rest),
        Some((&n, rest)) => Err(Error::Protocol(format!(
            "byte count {n} with {} data bytes; expected {expected}",
            rest.len()
        ))),
        None => Err(Error::Protocol("response without a byte count".to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn encodes_requests() {
        let read = Request::ReadHoldingRegisters {
            address: 0x006B,
            count: 3,
        };
        assert_eq!(read.encode_pdu(), [0x03, 0x00, 0x6B, 0x00, 0x03]);
        assert_eq!(
            Request::ReadCoils {
                address: 19,
                count: 19
            }
            .encode_pdu(),
            [0x01, 0x00, 0x13, 0x00, 0x13]
        );
        assert_eq!(
            Request::ReadDiscreteInputs {
                address: 196,
                count: 22
            }
            .encode_pdu()[0],
            0x02
        );
        assert_eq!(
            Request::ReadInputRegisters {
                address: 8,
                count: 1
            }
            .encode_pdu(),
            [0x04, 0, 8, 0, 1]
        );
        assert_eq!(
            Request::WriteSingleCoil {
                address: 172,
                value: true
            }
            .encode_pdu(),
            [0x05, 0x00, 0xAC, 0xFF, 0x00]
        );
        assert_eq!(
            Request::WriteSingleCoil {
                address: 172,
                value: false
            }
            .encode_pdu(),
            [0x05, 0x00, 0xAC, 0x00, 0x00]
        );
        assert_eq!(
            Request::WriteSingleRegister {
                address: 1,
                value: 3
            }
            .encode_pdu(),
            [0x06, 0x00, 0x01, 0x00, 0x03]
        );
        let multi = Request::WriteMultipleRegisters {
            address: 1,
            values: vec![0x000A, 0x0102],
        };
        assert_eq!(
            multi.encode_pdu(),
            [0x10, 0x00, 0x01, 0x00, 0x02, 0x04, 0x00, 0x0A, 0x01, 0x02]
        );
    }

    #[test]
    fn validates_quantities() {
        assert!(
            Request::ReadHoldingRegisters {
                address: 0,
                count: 125
            }
            .validate()
            .is_ok()
        );
        assert!(
            Request::ReadHoldingRegisters {
                address: 0,
                count: 126
            }
            .validate()
            .is_err()
        );
        assert!(
            Request::ReadCoils {
                address: 0,
                count: 0
            }
            .validate()
            .is_err()
        );
        assert!(
            Request::ReadCoils {
                address: 0,
                count: 2000
            }
            .validate()
            .is_ok()
        );
        assert!(
            Request::ReadInputRegisters {
                address: 65535,
                count: 2
            }
            .validate()
            .is_err()
        );
        assert!(
            Request::ReadInputRegisters {
                address: 65535,
                count: 1
            }
            .validate()
            .is_ok()
        );
        assert!(
            Request::WriteMultipleRegisters {
                address: 0,
                values: vec![0; 124]
            }
            .validate()
            .is_err()
        );
        assert!(
            Request::WriteMultipleRegisters {
                address: 0,
                values: vec![]
            }
            .validate()
            .is_err()
        );
    }

    #[test]
    fn decodes_responses() {
        let coils = Request::ReadCoils {
            address: 19,
            count: 19,
        };
        let Response::Bits(bits) = decode_pdu(&coils, &[0x01, 0x03, 0xCD, 0x6B, 0x05]).unwrap()
        else {
            panic!()
        };
        assert_eq!(bits.len(), 19);
        assert_eq!(
            &bits[..8],
            &[true, false, true, true, false, false, true, true]
        );
        assert_eq!(&bits[16..], &[true, false, true]);

        let regs = Request::ReadHoldingRegisters {
            address: 0x6B,
            count: 3,
        };
        assert_eq!(
            decode_pdu(&regs, &[0x03, 0x06, 0x02, 0x2B, 0x00, 0x00, 0x00, 0x64]).unwrap(),
            Response::Registers(vec![0x022B, 0, 0x64])
        );
        let w = Request::WriteSingleRegister {
            address: 1,
            value: 3,
        };
        assert_eq!(
            decode_pdu(&w, &[0x06, 0, 1, 0, 3]).unwrap(),
            Response::Written
        );
        assert!(matches!(
            decode_pdu(&w, &[0x06, 0, 1, 0, 4]),
            Err(Error::Protocol(_))
        ));
        let m = Request::WriteMultipleRegisters {
            address: 1,
            values: vec![1, 2],
        };
        assert_eq!(
            decode_pdu(&m, &[0x10, 0, 1, 0, 2]).unwrap(),
            Response::Written
        );
        let c = Request::WriteSingleCoil {
            address: 172,
            value: true,
        };
        assert_eq!(
            decode_pdu(&c, &[0x05, 0x00, 0xAC, 0xFF, 0x00]).unwrap(),
            Response::Written
        );
    }

    #[test]
    fn rejects_malformed_responses() {
        let regs = Request::ReadHoldingRegisters {
            address: 0,
            count: 2,
        };
        for pdu in [
            &[][..],
            &[0x03, 0x04, 0, 1, 0],
            &[0x03, 0x02, 0, 1],
            &[0x04, 0x04, 0, 1, 0, 2],
            &[0x83],
        ] {
            assert!(
                matches!(decode_pdu(&regs, pdu), Err(Error::Protocol(_))),
                "{pdu:02x?}"
            );
        }
    }

    #[test]
    fn exceptions_are_errors() {
        let regs = Request::ReadHoldingRegisters {
            address: 500,
            count: 1,
        };
        let err = decode_pdu(&regs, &[0x83, 0x02]).unwrap_err();
        assert!(matches!(
            err,
            Error::Exception {
                function: 0x03,
                code: 0x02
            }
        ));
        assert!(!err.breaks_connection());
        assert_eq!(
            err.to_string(),
            "modbus exception 0x02 (illegal data address) for function 0x03"
        );
    }

    #[test]
    fn response_lengths_follow_the_request() {
        let len = |r: Request| r.response_pdu_len();
        assert_eq!(
            len(Request::ReadCoils {
                address: 0,
                count: 1
            }),
            3
        );
        assert_eq!(
            len(Request::ReadDiscreteInputs {
                address: 0,
                count: 9
            }),
            4
        );
        assert_eq!(
            len(Request::ReadHoldingRegisters {
                address: 0,
                count: 2
            }),
            6
        );
        assert_eq!(
            len(Request::ReadInputRegisters {
                address: 0,
                count: 125
            }),
            252
        );
        assert_eq!(
            len(Request::WriteSingleCoil {
                address: 0,
                value: true
            }),
            5
        );
        assert_eq!(
            len(Request::WriteSingleRegister {
                address: 0,
                value: 1
            }),
            5
        );
        let multi = Request::WriteMultipleRegisters {
            address: 0,
            values: vec![1, 2],
        };
        assert_eq!(len(multi), 5);
    }
}
