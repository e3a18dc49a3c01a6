//! Modbus TCP framing: the MBAP header, whole ADUs, and a request/response client over any
//! `Read + Write` stream. The PDU inside (requests, answers, exceptions) is `modbus_core::pdu`.
//!
//! Plain Rust with no host calls, so it is unit-tested on the host:
//! `cargo test -p modbus-tcp --target x86_64-unknown-linux-gnu` (in `modules/`).
//!
//! An ADU is the 7-byte MBAP header — transaction id, protocol id (0), length (of what follows
//! the length field: the unit id plus the PDU), unit id — followed by the PDU.

use std::io::{Read, Write};

use modbus_core::pdu::{Error, MAX_PDU_LEN, Request, Response, decode_pdu};

/// MBAP header length in bytes.
pub const MBAP_LEN: usize = 7;

/// The MBAP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Pairs a response with its request.
    pub transaction_id: u16,
    /// Always 0 for Modbus.
    pub protocol_id: u16,
    /// Bytes that follow the length field (unit id + PDU).
    pub length: u16,
    /// Unit (slave) id.
    pub unit_id: u8,
}

impl Header {
    /// The header's 7 bytes.
    pub fn encode(&self) -> [u8; MBAP_LEN] {
        let [t0, t1] = self.transaction_id.to_be_bytes();
        let [p0, p1] = self.protocol_id.to_be_bytes();
        let [l0, l1] = self.length.to_be_bytes();
        [t0, t1, p0, p1, l0, l1, self.unit_id]
    }

    /// Parses and checks a header: protocol id 0, a length that leaves room for a PDU of
    /// 1..=253 bytes.
    pub fn decode(b: [u8; MBAP_LEN]) -> Result<Header, Error> {
        let h = Header {
            transaction_id: u16::from_be_bytes([b[0], b[1]]),
            protocol_id: u16::from_be_bytes([b[2], b[3]]),
            length: u16::from_be_bytes([b[4], b[5]]),
            unit_id: b[6],
        };
        if h.protocol_id != 0 {
            return Err(Error::Protocol(format!(
                "protocol id {} is not 0 (Modbus)",
                h.protocol_id
            )));
        }
        if h.length < 2 || usize::from(h.length) > MAX_PDU_LEN + 1 {
            return Err(Error::Protocol(format!(
                "MBAP length {} is outside 2..=254",
                h.length
            )));
        }
        Ok(h)
    }
}

/// A whole ADU for `request`.
pub fn encode_adu(transaction_id: u16, unit_id: u8, request: &Request) -> Vec<u8> {
    let pdu = request.encode_pdu();
    let header = Header {
        transaction_id,
        protocol_id: 0,
        length: (pdu.len() + 1) as u16,
        unit_id,
    };
    let mut adu = Vec::with_capacity(MBAP_LEN + pdu.len());
    adu.extend_from_slice(&header.encode());
    adu.extend_from_slice(&pdu);
    adu
}

/// Reads one ADU: its header and PDU.
pub fn read_adu<R: Read>(r: &mut R) -> Result<(Header, Vec<u8>), Error> {
    let mut head = [0u8; MBAP_LEN];
    r.read_exact(&mut head)?;
    let header = Header::decode(head)?;
    let mut pdu = vec![0u8; usize::from(header.length) - 1];
    r.read_exact(&mut pdu)?;
    Ok((header, pdu))
}

/// Decodes the PDU that answers `request`, checking it against the request.
/// Answers with another transaction id that a client skips before giving up (a late answer
/// to an earlier request).
const MAX_STALE_ANSWERS: usize = 4;

/// A Modbus TCP client: one request at a time over a blocking stream.
pub struct Client<S> {
    stream: S,
    unit_id: u8,
    next_transaction: u16,
}

impl<S: Read + Write> Client<S> {
    /// A client talking to unit `unit_id` over `stream`.
    pub fn new(stream: S, unit_id: u8) -> Self {
        Client {
            stream,
            unit_id,
            next_transaction: 1,
        }
    }

    /// The stream, e.g. to inspect it in tests.
    #[cfg(test)]
    pub fn stream(&self) -> &S {
        &self.stream
    }

    /// Sends `request` and waits for its answer.
    pub fn call(&mut self, request: &Request) -> Result<Response, Error> {
        request.validate()?;
        let tid = self.next_transaction;
        self.next_transaction = self.next_transaction.wrapping_add(1);
        self.stream
            .write_all(&encode_adu(tid, self.unit_id, request))?;
        self.stream.flush()?;
        for _ in 0..=MAX_STALE_ANSWERS {
            let (header, pdu) = read_adu(&mut self.stream)?;
            if header.transaction_id != tid {
                continue;
            }
            if header.unit_id != self.unit_id {
                return Err(Error::Protocol(format!(
                    "answer from unit {} to a request for unit {}",
                    header.unit_id, self.unit_id
                )));
            }
            return decode_pdu(request, &pdu);
        }
        Err(Error::Protocol(format!(
            "no answer with transaction id {tid}"
        )))
    }

    /// Reads registers (`input` chooses function 04 over 03).
    pub fn read_registers(
        &mut self,
        input: bool,
        address: u16,
        count: u16,
    ) -> Result<Vec<u16>, Error> {
        let request = if input {
            Request::ReadInputRegisters { address, count }
        } else {
            Request::ReadHoldingRegisters { address, count }
        };
        match self.call(&request)? {
            Response::Registers(r) => Ok(r),
            other => Err(Error::Protocol(format!("unexpected response {other:?}"))),
        }
    }

    /// Reads bits (`discrete` chooses function 02 over 01).
    pub fn read_bits(
        &mut self,
        discrete: bool,
        address: u16,
        count: u16,
    ) -> Result<Vec<bool>, Error> {
        let request = if discrete {
            Request::ReadDiscreteInputs { address, count }
        } else {
            Request::ReadCoils { address, count }
        };
        match self.call(&request)? {
            Response::Bits(b) => Ok(b),
            other => Err(Error::Protocol(format!("unexpected response {other:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{self, Cursor};

    /// A stream that records what is written and answers from a script.
    struct Scripted {
        written: Vec<u8>,
        replies: Cursor<Vec<u8>>,
    }

    impl Scripted {
        fn new(replies: &[&[u8]]) -> Self {
            Scripted {
                written: Vec::new(),
                replies: Cursor::new(replies.concat()),
            }
        }
    }

    impl Read for Scripted {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            // At most 3 bytes at a time, to exercise partial reads.
            let n = buf.len().min(3);
            self.replies.read(&mut buf[..n])
        }
    }

    impl Write for Scripted {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.written.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn encodes_adus() {
        let read = Request::ReadHoldingRegisters {
            address: 0x006B,
            count: 3,
        };
        assert_eq!(
            encode_adu(1, 0x11, &read),
            [0, 1, 0, 0, 0, 6, 0x11, 0x03, 0x00, 0x6B, 0x00, 0x03]
        );
        let multi = Request::WriteMultipleRegisters {
            address: 1,
            values: vec![0x000A, 0x0102],
        };
        assert_eq!(
            encode_adu(0xBEEF, 1, &multi)[..7],
            [0xBE, 0xEF, 0, 0, 0, 11, 1]
        );
    }
    #[test]
    fn headers() {
        assert!(Header::decode([0, 1, 0, 1, 0, 3, 1]).is_err()); // protocol id 1
        assert!(Header::decode([0, 1, 0, 0, 0, 1, 1]).is_err()); // no room for a function code
        assert!(Header::decode([0, 1, 0, 0, 1, 0, 1]).is_err()); // 256 > 254
        let h = Header::decode([0x12, 0x34, 0, 0, 0, 6, 9]).unwrap();
        assert_eq!((h.transaction_id, h.length, h.unit_id), (0x1234, 6, 9));
        assert_eq!(h.encode(), [0x12, 0x34, 0, 0, 0, 6, 9]);
    }

    #[test]
    fn client_round_trip_with_transaction_ids() {
        let stream = Scripted::new(&[
            &[0, 1, 0, 0, 0, 5, 7, 0x03, 0x02, 0x01, 0x2C],
            &[0, 2, 0, 0, 0, 4, 7, 0x01, 0x01, 0x01],
        ]);
        let mut client = Client::new(stream, 7);
        assert_eq!(client.read_registers(false, 10, 1).unwrap(), vec![300]);
        assert_eq!(client.read_bits(false, 3, 1).unwrap(), vec![true]);
        assert_eq!(
            client.stream().written,
            [
                [0, 1, 0, 0, 0, 6, 7, 0x03, 0, 10, 0, 1],
                [0, 2, 0, 0, 0, 6, 7, 0x01, 0, 3, 0, 1]
            ]
            .concat()
        );
    }

    #[test]
    fn client_skips_stale_answers() {
        let stream = Scripted::new(&[
            &[0, 9, 0, 0, 0, 5, 1, 0x04, 0x02, 0xFF, 0xFF], // answer to an older request
            &[0, 1, 0, 0, 0, 5, 1, 0x04, 0x02, 0x00, 0x2A],
        ]);
        let mut client = Client::new(stream, 1);
        assert_eq!(client.read_registers(true, 0, 1).unwrap(), vec![42]);
    }

    #[test]
    fn client_reports_exceptions_and_eof() {
        let stream = Scripted::new(&[&[0, 1, 0, 0, 0, 3, 1, 0x86, 0x03]]);
        let mut client = Client::new(stream, 1);
        let err = client
            .call(&Request::WriteSingleRegister {
                address: 0,
                value: 1,
            })
            .unwrap_err();
        assert!(matches!(
            err,
            Error::Exception {
                function: 0x06,
                code: 0x03
            }
        ));
        // The script is exhausted: the next call sees EOF, which breaks the connection.
        let err = client.read_registers(false, 0, 1).unwrap_err();
        assert!(matches!(&err, Error::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof));
        assert!(err.breaks_connection());
    }

    #[test]
    fn client_rejects_wrong_unit() {
        let stream = Scripted::new(&[&[0, 1, 0, 0, 0, 5, 2, 0x03, 0x02, 0, 1]]);
        let mut client = Client::new(stream, 1);
        assert!(matches!(
            client.read_registers(false, 0, 1),
            Err(Error::Protocol(_))
        ));
    }
}
