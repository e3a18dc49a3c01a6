//! One request/answer exchange on a line: drop stale input, send the frame, read the answer
//! whose length the request fixes (or a 5-byte exception) within the device's timeout, check
//! and decode it.
//!
//! Errors keep `modbus_core`'s kinds: no (whole) answer in time is `Io` with kind `TimedOut`;
//! a line that failed is another `Io`; a garbled or foreign frame is `Protocol`; an exception
//! is `Exception`.

use std::io;
use std::time::{Duration, Instant};

use modbus_core::pdu::{Error, Request, Response};

use crate::adu::{EXCEPTION_LEN, answer_len, decode_answer, encode_request, is_exception};
use crate::line::Line;

/// Sends `request` to `slave` and waits up to `timeout` for its answer. After a garbled answer
/// the line is drained until it has been quiet for `quiet` (the inter-frame gap), so the rest
/// of a bad frame is not taken for the start of the next answer.
pub fn transact<L: Line>(
    line: &mut L,
    slave: u8,
    request: &Request,
    timeout: Duration,
    quiet: Duration,
) -> Result<Response, Error> {
    request.validate()?;
    line.discard_input().map_err(line_failed)?;
    line.write_all(&encode_request(slave, request))
        .map_err(line_failed)?;
    let deadline = Instant::now() + timeout;
    let mut frame = Vec::with_capacity(answer_len(request));
    let wait = Wait {
        deadline,
        slave,
        timeout,
    };
    fill(line, &mut frame, EXCEPTION_LEN, &wait)?;
    if !is_exception(request, &frame) {
        fill(line, &mut frame, answer_len(request), &wait)?;
    }
    let answer = decode_answer(slave, request, &frame);
    if matches!(answer, Err(Error::Protocol(_))) {
        drain(line, quiet, deadline);
    }
    answer
}

/// How long an answer may take, and whose it is (for the error).
struct Wait {
    deadline: Instant,
    slave: u8,
    timeout: Duration,
}

/// Reads into `frame` until it holds `len` bytes, before the deadline.
fn fill<L: Line>(line: &mut L, frame: &mut Vec<u8>, len: usize, wait: &Wait) -> Result<(), Error> {
    while frame.len() < len {
        let left = wait.deadline.saturating_duration_since(Instant::now());
        // An empty read means nothing came for all of `left`: the time is up.
        let chunk = if left.is_zero() {
            Vec::new()
        } else {
            line.read(len - frame.len(), left).map_err(line_failed)?
        };
        if chunk.is_empty() {
            let (slave, timeout) = (wait.slave, wait.timeout);
            let what = if frame.is_empty() {
                format!("no answer from slave {slave} within {timeout:?}")
            } else {
                format!(
                    "answer from slave {slave} cut short: {} of {len} bytes within {timeout:?}",
                    frame.len()
                )
            };
            return Err(Error::Io(io::Error::new(io::ErrorKind::TimedOut, what)));
        }
        frame.extend_from_slice(&chunk);
    }
    Ok(())
}

/// Reads and drops input until the line has been silent for `quiet` (or `deadline` passed,
/// or the line failed: the next exchange discards what is left anyway).
fn drain<L: Line>(line: &mut L, quiet: Duration, deadline: Instant) {
    while Instant::now() < deadline {
        match line.read(256, quiet) {
            Ok(bytes) if !bytes.is_empty() => continue,
            _ => break,
        }
    }
}

/// An error of the line itself (not of the device's answer).
fn line_failed(message: String) -> Error {
    Error::Io(io::Error::other(message))
}

/// Whether `error` says the device did not answer in time (the line itself is fine).
pub fn timed_out(error: &Error) -> bool {
    matches!(error, Error::Io(e) if e.kind() == io::ErrorKind::TimedOut)
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use crate::crc::crc_bytes;

    /// A line that records what is sent and answers from a script: each scripted read hands
    /// out one chunk (at most what was asked for); an exhausted script is a silent line.
    #[derive(Default)]
    struct Scripted {
        sent: Vec<u8>,
        chunks: VecDeque<Vec<u8>>,
        discards: usize,
        fail_writes: bool,
    }

    impl Scripted {
        fn new(chunks: &[&[u8]]) -> Scripted {
            Scripted {
                chunks: chunks.iter().map(|c| c.to_vec()).collect(),
                ..Scripted::default()
            }
        }
    }

    impl Line for Scripted {
        fn discard_input(&mut self) -> Result<(), String> {
            self.discards += 1;
            Ok(())
        }
        fn write_all(&mut self, bytes: &[u8]) -> Result<(), String> {
            if self.fail_writes {
                return Err("serial port /dev/ttyUSB0: write: Input/output error".into());
            }
            self.sent.extend_from_slice(bytes);
            Ok(())
        }
        fn read(&mut self, max: usize, _timeout: Duration) -> Result<Vec<u8>, String> {
            let Some(mut chunk) = self.chunks.pop_front() else {
                return Ok(Vec::new());
            };
            if chunk.len() > max {
                let rest = chunk.split_off(max);
                self.chunks.push_front(rest);
            }
            Ok(chunk)
        }
    }

    fn framed(bytes: &[u8]) -> Vec<u8> {
        let mut frame = bytes.to_vec();
        frame.extend_from_slice(&crc_bytes(bytes));
        frame
    }

    const T: Duration = Duration::from_millis(200);
    const QUIET: Duration = Duration::from_millis(5);

    fn read_regs(count: u16) -> Request {
        Request::ReadHoldingRegisters { address: 0, count }
    }

    #[test]
    fn reads_an_answer_that_arrives_in_pieces() {
        let answer = framed(&[0x01, 0x03, 0x04, 0x00, 0x06, 0x01, 0x02]);
        let mut line = Scripted::new(&[&answer[..2], &answer[2..3], &answer[3..]]);
        let got = transact(&mut line, 1, &read_regs(2), T, QUIET).unwrap();
        assert_eq!(got, Response::Registers(vec![6, 0x0102]));
        assert_eq!(line.sent, framed(&[0x01, 0x03, 0x00, 0x00, 0x00, 0x02]));
        assert_eq!(line.discards, 1, "stale input dropped before the request");
    }

    #[test]
    fn an_exception_is_five_bytes() {
        // Nothing follows the exception frame: reading more would wait for the timeout.
        let mut line = Scripted::new(&[&framed(&[0x05, 0x83, 0x02])]);
        let err = transact(&mut line, 5, &read_regs(2), T, QUIET).unwrap_err();
        assert!(matches!(
            err,
            Error::Exception {
                function: 0x03,
                code: 0x02
            }
        ));
        assert!(line.chunks.is_empty());
    }

    #[test]
    fn a_silent_slave_times_out() {
        let mut line = Scripted::new(&[]);
        let err = transact(&mut line, 9, &read_regs(1), T, QUIET).unwrap_err();
        assert!(timed_out(&err), "{err}");
        assert!(err.to_string().contains("no answer from slave 9"), "{err}");
        assert!(err.breaks_connection());
    }

    #[test]
    fn a_cut_answer_times_out_saying_how_much_came() {
        let answer = framed(&[0x01, 0x03, 0x02, 0x00, 0x06]);
        let mut line = Scripted::new(&[&answer[..6]]);
        let err = transact(&mut line, 1, &read_regs(1), T, QUIET).unwrap_err();
        assert!(timed_out(&err));
        assert!(err.to_string().contains("cut short: 6 of 7 bytes"), "{err}");
    }

    #[test]
    fn a_bad_crc_is_an_error_and_the_rest_is_drained() {
        let mut answer = framed(&[0x01, 0x03, 0x02, 0x00, 0x06]);
        answer[3] ^= 0x10;
        let mut line = Scripted::new(&[&answer, b"\x00\x00 trailing noise"]);
        let err = transact(&mut line, 1, &read_regs(1), T, QUIET).unwrap_err();
        assert!(
            matches!(&err, Error::Protocol(m) if m.contains("CRC")),
            "{err}"
        );
        assert!(!timed_out(&err));
        assert!(
            line.chunks.is_empty(),
            "the noise after the frame was drained"
        );
    }

    #[test]
    fn a_foreign_answer_is_refused() {
        let mut line = Scripted::new(&[&framed(&[0x02, 0x03, 0x02, 0x00, 0x06])]);
        let err = transact(&mut line, 1, &read_regs(1), T, QUIET).unwrap_err();
        assert!(err.to_string().contains("from slave 2"), "{err}");
    }

    #[test]
    fn writes_are_confirmed_by_their_echo() {
        let request = Request::WriteSingleRegister {
            address: 4,
            value: 250,
        };
        let echo = framed(&[0x03, 0x06, 0x00, 0x04, 0x00, 0xFA]);
        let mut line = Scripted::new(&[&echo]);
        assert_eq!(
            transact(&mut line, 3, &request, T, QUIET).unwrap(),
            Response::Written
        );
        assert_eq!(line.sent, echo);
        let request = Request::WriteMultipleRegisters {
            address: 8,
            values: vec![1, 0x1170],
        };
        let mut line = Scripted::new(&[&framed(&[0x03, 0x10, 0x00, 0x08, 0x00, 0x02])]);
        assert_eq!(
            transact(&mut line, 3, &request, T, QUIET).unwrap(),
            Response::Written
        );
        assert_eq!(
            line.sent,
            framed(&[
                0x03, 0x10, 0x00, 0x08, 0x00, 0x02, 0x04, 0x00, 0x01, 0x11, 0x70
            ])
        );
    }

    #[test]
    fn a_failing_line_is_an_io_error_but_not_a_timeout() {
        let mut line = Scripted {
            fail_writes: true,
            ..Scripted::default()
        };
        let err = transact(&mut line, 1, &read_regs(1), T, QUIET).unwrap_err();
        assert!(matches!(err, Error::Io(_)));
        assert!(!timed_out(&err));
    }

    #[test]
    fn invalid_requests_never_reach_the_line() {
        let mut line = Scripted::new(&[]);
        let err = transact(&mut line, 1, &read_regs(200), T, QUIET).unwrap_err();
        assert!(matches!(err, Error::InvalidRequest(_)));
        assert!(line.sent.is_empty());
    }
}
