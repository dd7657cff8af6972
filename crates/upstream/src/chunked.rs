//! A decoder for HTTP/1.1 chunked bodies (RFC 9112 §7.1) that holds no input: it keeps only
//! its position in the framing, so any split of the bytes across reads decodes the same, and
//! each read is decoded in one pass however many chunks it holds.
//!
//! Chunk extensions are skipped, trailer fields are read and dropped, and every framing fault
//! is a [`ChunkError`] that says what was wrong.

use bytes::BytesMut;

/// Longest chunk-size line (size, extensions and line end) accepted. Real upstreams send a
/// few hex digits; a longer line is a broken or hostile peer, not data to buffer.
pub(crate) const MAX_SIZE_LINE: usize = 4096;

/// Most bytes of trailer fields accepted after the last chunk.
pub(crate) const MAX_TRAILERS: usize = 16 * 1024;

/// A fault in a chunked body's framing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    /// A chunk-size line starts with something other than a hex digit.
    #[error("a chunk size line has no hex digits (found byte 0x{0:02x})")]
    MissingSize(u8),
    /// A byte that belongs neither to the size nor to an extension.
    #[error("invalid byte 0x{0:02x} in a chunk size line")]
    InvalidSize(u8),
    /// The size does not fit in 64 bits.
    #[error("chunk size has more than 16 significant hex digits")]
    SizeTooLarge,
    /// The size line (with its extensions) is longer than [`MAX_SIZE_LINE`].
    #[error("chunk size line is longer than {MAX_SIZE_LINE} bytes")]
    LineTooLong,
    /// A CR not followed by LF.
    #[error("CR not followed by LF (found byte 0x{0:02x}) {1}")]
    BareCr(u8, &'static str),
    /// A chunk's data is not followed by a line end.
    #[error("chunk data is not followed by CRLF (found byte 0x{0:02x})")]
    NoCrlfAfterData(u8),
    /// The trailer section is longer than [`MAX_TRAILERS`].
    #[error("trailer fields are longer than {MAX_TRAILERS} bytes")]
    TrailersTooLarge,
    /// The input ended before the body did.
    #[error("the body ended {0}")]
    Truncated(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// At the start of a chunk-size line: a hex digit must come.
    SizeStart,
    /// In the size's hex digits.
    Size,
    /// After the size: whitespace, an extension, or the line end.
    AfterSize,
    /// In a chunk extension, skipped up to the line end.
    Extension,
    /// A CR ended the size line; LF must follow.
    SizeLf,
    /// In a chunk's data.
    Data,
    /// After a chunk's data: CR or LF.
    DataEnd,
    /// A CR followed a chunk's data; LF must follow.
    DataLf,
    /// At the start of a trailer line (an empty one ends the body).
    TrailerStart,
    /// In a trailer field line.
    Trailer,
    /// A CR ended a trailer field line; LF must follow.
    TrailerLf,
    /// A CR started an empty line: the last LF of the body must follow.
    EndLf,
    /// The body is complete.
    Done,
}

/// Where a chunked body's decoding stands.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    /// The chunk size being read, then the data bytes still to come.
    size: u64,
    /// Significant hex digits of the size so far.
    digits: u8,
    /// Bytes of the current size line, or of the trailers, so far.
    line: usize,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedDecoder {
    /// A decoder at the start of a body.
    pub fn new() -> Self {
        ChunkedDecoder {
            state: State::SizeStart,
            size: 0,
            digits: 0,
            line: 0,
        }
    }

    /// Whether the last chunk and the trailers have been read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes `input`, appending chunk data to `out`. Returns how many bytes were used: all
    /// of `input`, unless the body ended inside it (then the bytes after its end are not
    /// part of it).
    pub fn decode(&mut self, input: &[u8], out: &mut BytesMut) -> Result<usize, ChunkError> {
        let mut i = 0;
        while i < input.len() {
            if self.state == State::Data {
                // The hot path: copy as much data as this chunk still has.
                let take = usize::try_from(self.size)
                    .unwrap_or(usize::MAX)
                    .min(input.len() - i);
                out.extend_from_slice(&input[i..i + take]);
                i += take;
                self.size -= take as u64;
                if self.size == 0 {
                    self.state = State::DataEnd;
                }
                continue;
            }
            if self.state == State::Done {
                return Ok(i);
            }
            self.step(input[i])?;
            i += 1;
        }
        Ok(i)
    }

    /// What went wrong if the input ends now (the connection closed), or `None` when the
    /// body is complete.
    pub fn eof_error(&self) -> Option<ChunkError> {
        let where_ = match self.state {
            State::Done => return None,
            State::Data => format!("inside a chunk, {} bytes short", self.size),
            State::SizeStart
            | State::Size
            | State::AfterSize
            | State::Extension
            | State::SizeLf => "inside a chunk size line".to_owned(),
            State::DataEnd | State::DataLf => "after a chunk's data, before its CRLF".to_owned(),
            State::TrailerStart | State::Trailer | State::TrailerLf | State::EndLf => {
                "after the last chunk, before the end of its trailers".to_owned()
            }
        };
        Some(ChunkError::Truncated(where_))
    }

    /// One byte outside chunk data.
    fn step(&mut self, b: u8) -> Result<(), ChunkError> {
        match self.state {
            State::SizeStart | State::Size | State::AfterSize | State::Extension => {
                self.line += 1;
                if self.line > MAX_SIZE_LINE {
                    return Err(ChunkError::LineTooLong);
                }
                self.size_line(b)
            }
            State::SizeLf => {
                if b != b'\n' {
                    return Err(ChunkError::BareCr(b, "in a chunk size line"));
                }
                self.end_size_line();
                Ok(())
            }
            State::DataEnd => {
                match b {
                    b'\r' => self.state = State::DataLf,
                    b'\n' => self.next_chunk(),
                    other => return Err(ChunkError::NoCrlfAfterData(other)),
                }
                Ok(())
            }
            State::DataLf => {
                if b != b'\n' {
                    return Err(ChunkError::NoCrlfAfterData(b));
                }
                self.next_chunk();
                Ok(())
            }
            State::TrailerStart | State::Trailer | State::TrailerLf | State::EndLf => {
                self.line += 1;
                if self.line > MAX_TRAILERS {
                    return Err(ChunkError::TrailersTooLarge);
                }
                self.trailer(b)
            }
            // `decode` handles these before stepping.
            State::Data | State::Done => Ok(()),
        }
    }

    fn size_line(&mut self, b: u8) -> Result<(), ChunkError> {
        match (self.state, b) {
            (State::SizeStart | State::Size, _) if b.is_ascii_hexdigit() => {
                self.state = State::Size;
                // Leading zeros do not count towards the 64 bits.
                if self.digits > 0 || b != b'0' {
                    self.digits += 1;
                    if self.digits > 16 {
                        return Err(ChunkError::SizeTooLarge);
                    }
                }
                // A hex digit always converts; `to_digit` cannot fail here.
                let v = u64::from((b as char).to_digit(16).unwrap_or(0));
                self.size = (self.size << 4) | v;
                Ok(())
            }
            (State::SizeStart, _) => Err(ChunkError::MissingSize(b)),
            // Whitespace may stand before an extension's `;` (RFC 9112's BWS).
            (State::Size | State::AfterSize, b' ' | b'\t') => {
                self.state = State::AfterSize;
                Ok(())
            }
            (State::Size | State::AfterSize, b';') => {
                self.state = State::Extension;
                Ok(())
            }
            (State::Size | State::AfterSize | State::Extension, b'\r') => {
                self.state = State::SizeLf;
                Ok(())
            }
            // A bare LF ends a line too (RFC 9112 §2.2 lets a recipient accept it).
            (State::Size | State::AfterSize | State::Extension, b'\n') => {
                self.end_size_line();
                Ok(())
            }
            (State::Extension, 0x20..=0x7e | b'\t' | 0x80..=0xff) => Ok(()),
            _ => Err(ChunkError::InvalidSize(b)),
        }
    }

    fn end_size_line(&mut self) {
        self.line = 0;
        self.digits = 0;
        self.state = if self.size == 0 {
            State::TrailerStart
        } else {
            State::Data
        };
    }

    fn next_chunk(&mut self) {
        self.state = State::SizeStart;
        self.size = 0;
    }

    fn trailer(&mut self, b: u8) -> Result<(), ChunkError> {
        self.state = match (self.state, b) {
            (State::TrailerStart, b'\r') => State::EndLf,
            (State::TrailerStart, b'\n') | (State::EndLf, b'\n') => State::Done,
            (State::EndLf, other) => return Err(ChunkError::BareCr(other, "ending the body")),
            (State::Trailer, b'\r') => State::TrailerLf,
            (State::Trailer | State::TrailerLf, b'\n') => State::TrailerStart,
            (State::TrailerLf, other) => return Err(ChunkError::BareCr(other, "in a trailer")),
            (State::TrailerStart | State::Trailer, _) => State::Trailer,
            (other, _) => other,
        };
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// Decodes `input` fed in the given pieces: (data, bytes used, result).
    fn decode_pieces(pieces: &[&[u8]]) -> (Vec<u8>, usize, Result<bool, ChunkError>) {
        let mut d = ChunkedDecoder::new();
        let mut out = BytesMut::new();
        let mut used = 0;
        for p in pieces {
            match d.decode(p, &mut out) {
                Ok(n) => used += n,
                Err(e) => return (out.to_vec(), used, Err(e)),
            }
        }
        (out.to_vec(), used, Ok(d.is_done()))
    }

    fn decode_all(input: &[u8]) -> (Vec<u8>, usize, Result<bool, ChunkError>) {
        decode_pieces(&[input])
    }

    const BODY: &[u8] =
        b"5\r\nhello\r\n1;name=value;flag\r\n \r\n6 ; ext=\"q;uo\\\"ted\"\r\nworld!\r\n\
        0\r\nx-trailer: yes\r\nother: 1\r\n\r\n";

    #[test]
    fn decodes_chunks_extensions_and_trailers() {
        assert_eq!(
            decode_all(BODY),
            (b"hello world!".to_vec(), BODY.len(), Ok(true))
        );
    }

    #[test]
    fn every_split_point_decodes_the_same() {
        for at in 0..=BODY.len() {
            let (a, b) = BODY.split_at(at);
            assert_eq!(
                decode_pieces(&[a, b]),
                (b"hello world!".to_vec(), BODY.len(), Ok(true)),
                "split at {at}"
            );
        }
        // And one byte at a time.
        let bytes: Vec<&[u8]> = BODY.chunks(1).collect();
        assert_eq!(
            decode_pieces(&bytes),
            (b"hello world!".to_vec(), BODY.len(), Ok(true))
        );
    }

    #[test]
    fn every_split_point_of_every_error_is_the_same_error() {
        let cases: &[(&[u8], ChunkError)] = &[
            (b"5\r\nhello\r\nzz\r\n", ChunkError::MissingSize(b'z')),
            (b"5x\r\nhello\r\n", ChunkError::InvalidSize(b'x')),
            (
                b"5\rxhello\r\n",
                ChunkError::BareCr(b'x', "in a chunk size line"),
            ),
            (b"5\r\nhelloXX", ChunkError::NoCrlfAfterData(b'X')),
            (b"5\r\nhello\rX", ChunkError::NoCrlfAfterData(b'X')),
            (b"0\r\nt: 1\rX", ChunkError::BareCr(b'X', "in a trailer")),
            (b"0\r\n\rX", ChunkError::BareCr(b'X', "ending the body")),
            (b"10000000000000000\r\n", ChunkError::SizeTooLarge),
        ];
        for (input, want) in cases {
            for at in 0..=input.len() {
                let (a, b) = input.split_at(at);
                let (_, _, got) = decode_pieces(&[a, b]);
                assert_eq!(
                    got,
                    Err(want.clone()),
                    "{:?} split at {at}",
                    String::from_utf8_lossy(input)
                );
            }
        }
    }

    #[test]
    fn bad_hex_is_refused_with_the_byte() {
        assert_eq!(decode_all(b"g\r\n").2, Err(ChunkError::MissingSize(b'g')));
        assert_eq!(decode_all(b"\r\n").2, Err(ChunkError::MissingSize(b'\r')));
        assert_eq!(decode_all(b"-5\r\n").2, Err(ChunkError::MissingSize(b'-')));
        assert_eq!(decode_all(b"5g\r\n").2, Err(ChunkError::InvalidSize(b'g')));
        assert_eq!(decode_all(b"5 5\r\n").2, Err(ChunkError::InvalidSize(b'5')));
        assert_eq!(decode_all(b"0x5\r\n").2, Err(ChunkError::InvalidSize(b'x')));
        // A control byte inside an extension is no extension.
        assert_eq!(
            decode_all(b"5;a\x00\r\n").2,
            Err(ChunkError::InvalidSize(0))
        );
    }

    #[test]
    fn sizes_up_to_64_bits_are_read_and_larger_ones_refused() {
        // Leading zeros do not count.
        let (data, _, done) = decode_all(b"00000000000000000000003\r\nabc\r\n0\r\n\r\n");
        assert_eq!((data, done), (b"abc".to_vec(), Ok(true)));
        // The largest size is read (and the data is awaited, not preallocated).
        let mut d = ChunkedDecoder::new();
        let mut out = BytesMut::new();
        assert_eq!(d.decode(b"ffffffffffffffff\r\nab", &mut out), Ok(20));
        assert_eq!(&out[..], b"ab");
        assert_eq!(
            d.eof_error(),
            Some(ChunkError::Truncated(format!(
                "inside a chunk, {} bytes short",
                u64::MAX - 2
            )))
        );
        assert_eq!(
            decode_all(b"1ffffffffffffffff\r\n").2,
            Err(ChunkError::SizeTooLarge)
        );
    }

    #[test]
    fn over_long_lines_and_trailers_are_refused() {
        let mut line = b"5;".to_vec();
        line.extend(std::iter::repeat_n(b'a', MAX_SIZE_LINE));
        assert_eq!(decode_all(&line).2, Err(ChunkError::LineTooLong));
        // An extension just under the limit is fine.
        let mut ok = b"5;".to_vec();
        ok.extend(std::iter::repeat_n(b'a', MAX_SIZE_LINE - 4));
        ok.extend_from_slice(b"\r\nhello\r\n0\r\n\r\n");
        assert_eq!(decode_all(&ok).2, Ok(true));

        let mut trailers = b"0\r\n".to_vec();
        while trailers.len() < MAX_TRAILERS + 10 {
            trailers.extend_from_slice(b"x-filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        assert_eq!(decode_all(&trailers).2, Err(ChunkError::TrailersTooLarge));
    }

    #[test]
    fn bare_lf_line_ends_are_accepted() {
        let body = b"5\nhello\n3;x\nabc\n0\ntrailer: 1\n\n";
        assert_eq!(
            decode_all(body),
            (b"helloabc".to_vec(), body.len(), Ok(true))
        );
    }

    #[test]
    fn bytes_after_the_body_are_not_used() {
        let mut input = b"3\r\nabc\r\n0\r\n\r\n".to_vec();
        let end = input.len();
        input.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        let mut d = ChunkedDecoder::new();
        let mut out = BytesMut::new();
        assert_eq!(d.decode(&input, &mut out), Ok(end));
        assert!(d.is_done());
        // Once done, nothing more is taken.
        assert_eq!(d.decode(b"more", &mut out), Ok(0));
        assert_eq!(&out[..], b"abc");
    }

    #[test]
    fn a_body_cut_anywhere_says_where() {
        let whole = b"5\r\nhello\r\n0\r\nt: 1\r\n\r\n";
        let expect = |at: usize| match at {
            0..=2 => "inside a chunk size line".to_owned(),
            3..=7 => format!("inside a chunk, {} bytes short", 8 - at),
            8 | 9 => "after a chunk's data, before its CRLF".to_owned(),
            10..=12 => "inside a chunk size line".to_owned(),
            _ => "after the last chunk, before the end of its trailers".to_owned(),
        };
        for at in 0..whole.len() {
            let mut d = ChunkedDecoder::new();
            let mut out = BytesMut::new();
            assert_eq!(d.decode(&whole[..at], &mut out), Ok(at));
            assert_eq!(
                d.eof_error(),
                Some(ChunkError::Truncated(expect(at))),
                "cut at {at}"
            );
        }
        let mut d = ChunkedDecoder::new();
        assert_eq!(d.decode(whole, &mut BytesMut::new()), Ok(whole.len()));
        assert_eq!(d.eof_error(), None);
    }
}
