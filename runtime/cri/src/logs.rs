//! Reading the log files a CRI runtime writes for each container (at the sandbox's
//! `log_directory` joined with the container's `log_path`), which is what `kubectl logs` is
//! served from.
//!
//! Each line is `<RFC 3339 time> <stdout|stderr> <tag> <content>\n`, e.g.
//! `2024-05-01T10:20:30.123456789Z stdout F hello`. The tag is `F` for a full line and `P` for a
//! part of a long one (containerd splits lines over its maximum, 16 KiB by default): a full
//! line's content is printed followed by a newline, a partial one's without, so the parts join
//! up again. Later tags may follow the first, after `:`; they are ignored.

use std::io::BufRead;
use std::time::SystemTime;

use crate::parse_rfc3339;

/// Which output of the container a line came from (`kubectl logs` can show one or both).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl Stream {
    /// The name used in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
        }
    }
}

/// One parsed line, borrowing from the line's bytes (no copy while scanning for `--since`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine<'a> {
    /// When the runtime read the output.
    pub time: SystemTime,
    /// The time as written, for `--timestamps` output (it is already RFC3339Nano).
    pub timestamp: &'a str,
    /// stdout or stderr.
    pub stream: Stream,
    /// A part of a longer line: print without a newline after it.
    pub partial: bool,
    /// The output itself, without the line's newline; may be any bytes.
    pub content: &'a [u8],
}

impl LogLine<'_> {
    /// An owned copy.
    pub fn to_entry(&self) -> LogEntry {
        LogEntry {
            time: self.time,
            timestamp: self.timestamp.to_owned(),
            stream: self.stream,
            partial: self.partial,
            content: self.content.to_vec(),
        }
    }
}

/// One parsed line, owned: what [`LogReader`] yields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    /// When the runtime read the output.
    pub time: SystemTime,
    /// The time as written.
    pub timestamp: String,
    /// stdout or stderr.
    pub stream: Stream,
    /// A part of a longer line: print without a newline after it.
    pub partial: bool,
    /// The output itself, without the line's newline.
    pub content: Vec<u8>,
}

/// Why a line is not a CRI log line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LogLineError {
    /// The first field is not an RFC 3339 time.
    #[error("CRI log line: bad timestamp {0:?}")]
    Timestamp(String),
    /// The second field is neither stdout nor stderr.
    #[error("CRI log line: bad stream {0:?}")]
    Stream(String),
    /// The third field's first tag is neither F nor P.
    #[error("CRI log line: bad tag {0:?}")]
    Tag(String),
    /// The line ends before the stream or the tag.
    #[error("CRI log line: too few fields")]
    Truncated,
    /// The line is longer than [`MAX_LINE`] (the runtime never writes such; the file is damaged).
    #[error("CRI log line: longer than {MAX_LINE} bytes")]
    TooLong,
}

/// Parses one line, with or without its final newline.
pub fn parse_line(line: &[u8]) -> Result<LogLine<'_>, LogLineError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let (timestamp, rest) = split_field(line).ok_or(LogLineError::Truncated)?;
    let timestamp = std::str::from_utf8(timestamp)
        .map_err(|_| LogLineError::Timestamp(String::from_utf8_lossy(timestamp).into_owned()))?;
    let time =
        parse_rfc3339(timestamp).ok_or_else(|| LogLineError::Timestamp(timestamp.to_owned()))?;
    let (stream, rest) = split_field(rest).ok_or(LogLineError::Truncated)?;
    let stream = match stream {
        b"stdout" => Stream::Stdout,
        b"stderr" => Stream::Stderr,
        other => return Err(LogLineError::Stream(lossy(other))),
    };
    // A line with an empty content may lack the space after the tag.
    let (tags, content) = split_field(rest).unwrap_or((rest, &[]));
    let first_tag = tags.split(|&c| c == b':').next().unwrap_or_default();
    let partial = match first_tag {
        b"F" => false,
        b"P" => true,
        _ => return Err(LogLineError::Tag(lossy(tags))),
    };
    Ok(LogLine {
        time,
        timestamp,
        stream,
        partial,
        content,
    })
}

/// The bytes before the first space and those after it.
fn split_field(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let space = bytes.iter().position(|&c| c == b' ')?;
    Some((&bytes[..space], &bytes[space + 1..]))
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The longest line [`LogReader`] holds in memory: far above containerd's split size, so
/// only a damaged file reaches it.
pub const MAX_LINE: usize = 1 << 20;

/// Why [`LogReader`] could not give a line.
#[derive(Debug, thiserror::Error)]
pub enum LogReadError {
    /// Reading the file failed; the reader is done.
    #[error("reading the CRI log: {0}")]
    Io(#[from] std::io::Error),
    /// One line is malformed; the reader goes on with the next (kubelet skips such lines too).
    #[error("line {number}: {error}")]
    Line {
        /// 1-based line number.
        number: u64,
        /// What is wrong with it.
        error: LogLineError,
    },
}

/// The lines of a CRI log file, in order. A last line without its newline (the runtime is
/// writing it) is yielded as it is; a follower should hold it back and read again.
pub struct LogReader<R> {
    input: R,
    line: Vec<u8>,
    number: u64,
    done: bool,
}

impl<R: BufRead> LogReader<R> {
    /// Reads from `input` (e.g. a `BufReader` over the file, seeked where to start).
    pub fn new(input: R) -> Self {
        Self {
            input,
            line: Vec::new(),
            number: 0,
            done: false,
        }
    }

    /// Reads one line into `self.line`, at most [`MAX_LINE`] bytes of it (the rest is
    /// skipped). Returns false at the end of the input, and whether the line was cut.
    fn read_line(&mut self) -> std::io::Result<Option<bool>> {
        self.line.clear();
        let mut cut = false;
        let mut any = false;
        loop {
            let buffer = match self.input.fill_buf() {
                Ok(buffer) => buffer,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            };
            if buffer.is_empty() {
                return Ok(any.then_some(cut));
            }
            any = true;
            let (chunk, end) = match buffer.iter().position(|&c| c == b'\n') {
                Some(newline) => (&buffer[..=newline], true),
                None => (buffer, false),
            };
            let room = MAX_LINE.saturating_sub(self.line.len());
            if chunk.len() > room {
                cut = true;
            }
            self.line.extend_from_slice(&chunk[..chunk.len().min(room)]);
            let used = chunk.len();
            self.input.consume(used);
            if end {
                return Ok(Some(cut));
            }
        }
    }
}

impl<R: BufRead> Iterator for LogReader<R> {
    type Item = Result<LogEntry, LogReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let cut = match self.read_line() {
            Ok(Some(cut)) => cut,
            Ok(None) => {
                self.done = true;
                return None;
            }
            Err(error) => {
                self.done = true;
                return Some(Err(error.into()));
            }
        };
        self.number += 1;
        let number = self.number;
        if cut {
            return Some(Err(LogReadError::Line {
                number,
                error: LogLineError::TooLong,
            }));
        }
        Some(
            parse_line(&self.line)
                .map(|line| line.to_entry())
                .map_err(|error| LogReadError::Line { number, error }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn full_and_partial_lines() {
        let line = parse_line(b"2016-10-06T00:17:09.669794202Z stdout F hello world\n").unwrap();
        assert_eq!(
            line.time,
            UNIX_EPOCH + Duration::new(1_475_713_029, 669_794_202)
        );
        assert_eq!(line.timestamp, "2016-10-06T00:17:09.669794202Z");
        assert_eq!(line.stream, Stream::Stdout);
        assert!(!line.partial);
        assert_eq!(line.content, b"hello world");

        let line = parse_line(b"2016-10-06T00:17:10.113242941Z stderr P part one").unwrap();
        assert_eq!(line.stream, Stream::Stderr);
        assert!(line.partial);
        assert_eq!(line.content, b"part one");
    }

    #[test]
    fn content_keeps_spaces_and_any_bytes() {
        let line = parse_line(b"2016-10-06T00:17:09Z stdout F  two  spaces \xff\r\n").unwrap();
        assert_eq!(line.content, b" two  spaces \xff\r");
    }

    #[test]
    fn empty_content_with_or_without_the_space() {
        assert_eq!(
            parse_line(b"2016-10-06T00:17:09Z stdout F \n")
                .unwrap()
                .content,
            b""
        );
        assert_eq!(
            parse_line(b"2016-10-06T00:17:09Z stdout F")
                .unwrap()
                .content,
            b""
        );
    }

    #[test]
    fn later_tags_are_ignored() {
        let line = parse_line(b"2016-10-06T00:17:09Z stdout P:x:y data").unwrap();
        assert!(line.partial);
        assert_eq!(line.content, b"data");
    }

    #[test]
    fn malformed_lines() {
        assert_eq!(parse_line(b""), Err(LogLineError::Truncated));
        assert_eq!(parse_line(b"hello\n"), Err(LogLineError::Truncated));
        assert_eq!(
            parse_line(b"yesterday stdout F x"),
            Err(LogLineError::Timestamp("yesterday".into()))
        );
        assert_eq!(
            parse_line(b"2016-10-06T00:17:09Z stdin F x"),
            Err(LogLineError::Stream("stdin".into()))
        );
        assert_eq!(
            parse_line(b"2016-10-06T00:17:09Z stdout"),
            Err(LogLineError::Truncated)
        );
        assert_eq!(
            parse_line(b"2016-10-06T00:17:09Z stdout X x"),
            Err(LogLineError::Tag("X".into()))
        );
    }

    #[test]
    fn reader_yields_lines_and_skippable_errors() {
        let file: &[u8] = b"2016-10-06T00:17:09Z stdout P abc\n\
            2016-10-06T00:17:09Z stdout F def\n\
            garbage\n\
            2016-10-06T00:17:10Z stderr F oops\n\
            2016-10-06T00:17:11Z stdout F unfinish";
        let items: Vec<_> = LogReader::new(file).collect();
        assert_eq!(items.len(), 5);
        let ok: Vec<&LogEntry> = items.iter().filter_map(|item| item.as_ref().ok()).collect();
        let joined: Vec<u8> = ok[..2]
            .iter()
            .flat_map(|entry| {
                let mut bytes = entry.content.clone();
                if !entry.partial {
                    bytes.push(b'\n');
                }
                bytes
            })
            .collect();
        assert_eq!(joined, b"abcdef\n");
        assert!(matches!(
            items[2],
            Err(LogReadError::Line {
                number: 3,
                error: LogLineError::Truncated
            })
        ));
        assert_eq!(ok[2].stream, Stream::Stderr);
        assert_eq!(ok[3].content, b"unfinish");
    }

    #[test]
    fn reader_skips_overlong_lines() {
        let mut file = b"2016-10-06T00:17:09Z stdout F ".to_vec();
        file.extend(std::iter::repeat_n(b'x', MAX_LINE + 10));
        file.extend_from_slice(b"\n2016-10-06T00:17:09Z stdout F next\n");
        let reader = LogReader::new(std::io::BufReader::with_capacity(4096, &file[..]));
        let items: Vec<_> = reader.collect();
        assert_eq!(items.len(), 2);
        assert!(matches!(
            items[0],
            Err(LogReadError::Line {
                number: 1,
                error: LogLineError::TooLong
            })
        ));
        assert_eq!(items[1].as_ref().unwrap().content, b"next");
    }
}
