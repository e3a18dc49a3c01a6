//! The RTU frame (ADU): the slave address, the PDU, and the CRC-16 of both, low byte first.
//! A serial line has no length field, so the reader computes the length of the answer from
//! the request (or sees an exception's fixed 5 bytes).

use modbus_core::pdu::{Error, MAX_PDU_LEN, Request, Response, decode_pdu};

use crate::crc::{crc_bytes, crc16};

/// Length of an exception answer: address, function code | 0x80, exception code, CRC.
pub const EXCEPTION_LEN: usize = 5;

/// Address and CRC around the PDU.
const OVERHEAD: usize = 3;

/// Lowest and highest slave address that answers (0 is broadcast: no answer ever comes;
/// 248..=255 are reserved).
pub const SLAVE_IDS: std::ops::RangeInclusive<u8> = 1..=247;

/// The frame that sends `request` to `slave`.
pub fn encode_request(slave: u8, request: &Request) -> Vec<u8> {
    let pdu = request.encode_pdu();
    let mut frame = Vec::with_capacity(pdu.len() + OVERHEAD);
    frame.push(slave);
    frame.extend_from_slice(&pdu);
    let crc = crc_bytes(&frame);
    frame.extend_from_slice(&crc);
    frame
}

/// Length of a normal answer to `request`.
pub fn answer_len(request: &Request) -> usize {
    request.response_pdu_len() + OVERHEAD
}

/// Whether the first bytes of an answer (at least two) announce an exception to `request`.
pub fn is_exception(request: &Request, head: &[u8]) -> bool {
    head.get(1) == Some(&(request.function() | 0x80))
}

/// Checks a whole answer frame — CRC, then the slave's address — and decodes its PDU against
/// `request`. A frame whose CRC does not match is an error, never a value.
pub fn decode_answer(slave: u8, request: &Request, frame: &[u8]) -> Result<Response, Error> {
    if frame.len() < EXCEPTION_LEN || frame.len() > MAX_PDU_LEN + OVERHEAD {
        return Err(Error::Protocol(format!(
            "answer of {} bytes is not a frame",
            frame.len()
        )));
    }
    let (body, sent) = frame.split_at(frame.len() - 2);
    let sent = u16::from_le_bytes([sent[0], sent[1]]);
    let computed = crc16(body);
    if sent != computed {
        return Err(Error::Protocol(format!(
            "CRC mismatch: the frame carries {sent:#06x}, its bytes give {computed:#06x}"
        )));
    }
    if body[0] != slave {
        return Err(Error::Protocol(format!(
            "answer from slave {} to a request for slave {slave}",
            body[0]
        )));
    }
    decode_pdu(request, &body[1..])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `bytes` followed by their CRC.
    fn framed(bytes: &[u8]) -> Vec<u8> {
        let mut frame = bytes.to_vec();
        frame.extend_from_slice(&crc_bytes(bytes));
        frame
    }

    #[test]
    fn encodes_requests() {
        let read = Request::ReadHoldingRegisters {
            address: 0,
            count: 1,
        };
        assert_eq!(
            encode_request(1, &read),
            [0x01, 0x03, 0x00, 0x00, 0x00, 0x01, 0x84, 0x0A]
        );
        let coil = Request::WriteSingleCoil {
            address: 0xAC,
            value: true,
        };
        assert_eq!(
            encode_request(0x11, &coil),
            [0x11, 0x05, 0x00, 0xAC, 0xFF, 0x00, 0x4E, 0x8B]
        );
        let multi = Request::WriteMultipleRegisters {
            address: 1,
            values: vec![0x000A, 0x0102],
        };
        let frame = encode_request(7, &multi);
        assert_eq!(frame.len(), 1 + 10 + 2);
        assert_eq!(crc16(&frame), 0);
    }

    #[test]
    fn answer_lengths() {
        let regs = Request::ReadInputRegisters {
            address: 0,
            count: 2,
        };
        assert_eq!(answer_len(&regs), 9);
        let bits = Request::ReadCoils {
            address: 0,
            count: 1,
        };
        assert_eq!(answer_len(&bits), 6);
        let write = Request::WriteSingleRegister {
            address: 0,
            value: 1,
        };
        assert_eq!(answer_len(&write), 8);
        assert!(is_exception(&regs, &[0x01, 0x84]));
        assert!(!is_exception(&regs, &[0x01, 0x04]));
        assert!(!is_exception(&regs, &[0x01, 0x83]));
    }

    #[test]
    fn decodes_answers() {
        let read = Request::ReadHoldingRegisters {
            address: 0,
            count: 1,
        };
        assert_eq!(
            decode_answer(1, &read, &[0x01, 0x03, 0x02, 0x00, 0x06, 0x38, 0x46]).unwrap(),
            Response::Registers(vec![6])
        );
        let coil = Request::WriteSingleCoil {
            address: 0xAC,
            value: true,
        };
        assert_eq!(
            decode_answer(0x11, &coil, &encode_request(0x11, &coil)).unwrap(),
            Response::Written
        );
    }

    #[test]
    fn a_bad_crc_is_an_error_never_a_value() {
        let read = Request::ReadHoldingRegisters {
            address: 0,
            count: 1,
        };
        let mut frame = framed(&[0x01, 0x03, 0x02, 0x00, 0x06]);
        frame[4] = 0x07; // one bit flipped on the line
        let err = decode_answer(1, &read, &frame).unwrap_err();
        assert!(
            matches!(&err, Error::Protocol(m) if m.contains("CRC")),
            "{err}"
        );
        let mut frame = framed(&[0x01, 0x03, 0x02, 0x00, 0x06]);
        frame[6] ^= 0xFF;
        assert!(decode_answer(1, &read, &frame).is_err());
    }

    #[test]
    fn answers_from_another_slave_are_refused() {
        let read = Request::ReadHoldingRegisters {
            address: 0,
            count: 1,
        };
        let err = decode_answer(2, &read, &framed(&[0x01, 0x03, 0x02, 0x00, 0x06])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "protocol error: answer from slave 1 to a request for slave 2"
        );
    }

    #[test]
    fn exception_frames() {
        let read = Request::ReadHoldingRegisters {
            address: 500,
            count: 1,
        };
        let frame = framed(&[0x01, 0x83, 0x02]);
        assert_eq!(frame.len(), EXCEPTION_LEN);
        assert!(is_exception(&read, &frame));
        let err = decode_answer(1, &read, &frame).unwrap_err();
        assert!(matches!(
            err,
            Error::Exception {
                function: 0x03,
                code: 0x02
            }
        ));
        assert!(!err.breaks_connection());
        // An exception with a bad CRC is a broken frame, not an exception.
        let mut bad = frame.clone();
        bad[2] = 0x03;
        assert!(matches!(
            decode_answer(1, &read, &bad),
            Err(Error::Protocol(_))
        ));
    }

    #[test]
    fn short_or_long_frames_are_refused() {
        let read = Request::ReadCoils {
            address: 0,
            count: 1,
        };
        assert!(decode_answer(1, &read, &[0x01, 0x01, 0x01, 0x01]).is_err());
        assert!(decode_answer(1, &read, &framed(&[0x01; 300])).is_err());
    }
}
