//! Reading a trace file packet by packet, tolerant of a cut at the end.
//!
//! A writer killed mid-`write` leaves a file whose last packet is torn. The
//! file is still a valid prefix: every whole packet before the cut decodes,
//! and [`Packets::stop`] says where and why reading stopped.

use crate::proto::{TracePacket, TRACE_PACKET_FIELD};
use prost::encoding::{decode_key, decode_varint, WireType};
use prost::Message;

/// Why reading stopped before the end of the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// The last packet (or its header) is incomplete: the file was cut.
    Cut { offset: usize },
    /// Bytes that are not a `Trace.packet` field, or a packet that does not decode.
    Garbage { offset: usize, why: String },
}

/// Iterator over the packets of a trace file's bytes.
pub struct Packets<'a> {
    bytes: &'a [u8],
    offset: usize,
    stop: Option<Stop>,
}

/// The packets of `bytes` (a whole or cut trace file), in file order.
pub fn packets(bytes: &[u8]) -> Packets<'_> {
    Packets {
        bytes,
        offset: 0,
        stop: None,
    }
}

impl<'a> Packets<'a> {
    /// `None` while reading, and after a clean end; why it stopped otherwise.
    pub fn stop(&self) -> Option<&Stop> {
        self.stop.as_ref()
    }

    /// Bytes consumed by whole packets so far.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The next packet's bytes, undecoded, and their offset; `None` at the
    /// end or where reading stopped ([`stop`](Self::stop) says why). A
    /// caller that finds the bytes do not decode says so with
    /// [`reject`](Self::reject).
    pub fn next_bytes(&mut self) -> Option<(usize, &'a [u8])> {
        if self.stop.is_some() {
            return None;
        }
        let at = self.offset;
        match self.next_body() {
            Ok(Some(body)) => Some((at, body)),
            Ok(None) => None,
            Err(stop) => {
                self.stop = Some(stop);
                None
            }
        }
    }

    /// The packet at `offset` (from [`next_bytes`](Self::next_bytes)) does not
    /// decode: reading stops there as garbage.
    pub fn reject(&mut self, offset: usize, why: String) {
        self.offset = offset;
        self.stop = Some(Stop::Garbage { offset, why });
    }

    fn next_body(&mut self) -> Result<Option<&'a [u8]>, Stop> {
        let mut rest = &self.bytes[self.offset..];
        if rest.is_empty() {
            return Ok(None);
        }
        let at = self.offset;
        let before = rest.len();
        let (field, wire) = match decode_key(&mut rest) {
            Ok(k) => k,
            // A complete varint that is no valid key is garbage; a torn one is a cut.
            Err(e) if has_varint(&self.bytes[at..]) => {
                return Err(Stop::Garbage {
                    offset: at,
                    why: e.to_string(),
                })
            }
            Err(_) => return Err(Stop::Cut { offset: at }),
        };
        if field != TRACE_PACKET_FIELD || wire != WireType::LengthDelimited {
            return Err(Stop::Garbage {
                offset: at,
                why: format!("field {field} ({wire:?}) where a packet was expected"),
            });
        }
        let len = decode_varint(&mut rest).map_err(|_| Stop::Cut { offset: at })?;
        let header = before - rest.len();
        if (rest.len() as u64) < len {
            return Err(Stop::Cut { offset: at });
        }
        let len = len as usize;
        self.offset += header + len;
        Ok(Some(&self.bytes[at + header..at + header + len]))
    }
}

/// Whether `b` starts with a whole varint (a byte without the continuation bit
/// within the first ten).
fn has_varint(b: &[u8]) -> bool {
    b.iter().take(10).any(|&x| x < 0x80)
}

impl Iterator for Packets<'_> {
    type Item = TracePacket;

    fn next(&mut self) -> Option<TracePacket> {
        if self.stop.is_some() {
            return None;
        }
        let at = self.offset;
        match self.next_body() {
            Ok(Some(body)) => match TracePacket::decode(body) {
                Ok(p) => Some(p),
                Err(e) => {
                    self.offset = at;
                    self.stop = Some(Stop::Garbage {
                        offset: at,
                        why: e.to_string(),
                    });
                    None
                }
            },
            Ok(None) => None,
            Err(stop) => {
                self.stop = Some(stop);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{EventType, TrackEvent};

    fn packet(ts: u64) -> TracePacket {
        TracePacket {
            timestamp: Some(ts),
            trusted_packet_sequence_id: Some(7),
            track_event: Some(TrackEvent {
                r#type: Some(EventType::Instant as i32),
                track_uuid: Some(3),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn file(n: u64) -> Vec<u8> {
        let mut out = Vec::new();
        for ts in 0..n {
            prost::encoding::message::encode(TRACE_PACKET_FIELD, &packet(1000 + ts), &mut out);
        }
        out
    }

    #[test]
    fn whole_file_reads_every_packet() {
        let bytes = file(50);
        let mut it = packets(&bytes);
        let got: Vec<_> = it.by_ref().map(|p| p.timestamp.unwrap()).collect();
        assert_eq!(got, (1000..1050).collect::<Vec<_>>());
        assert_eq!(it.stop(), None);
        assert_eq!(it.offset(), bytes.len());
    }

    #[test]
    fn every_cut_keeps_the_whole_packets_before_it() {
        let bytes = file(20);
        let one = bytes.len() / 20;
        for cut in 0..bytes.len() {
            let mut it = packets(&bytes[..cut]);
            let n = it.by_ref().count();
            assert_eq!(n, cut / one, "cut at {cut}");
            if cut % one == 0 {
                assert_eq!(it.stop(), None, "cut at {cut} is a packet boundary");
            } else {
                assert_eq!(
                    it.stop(),
                    Some(&Stop::Cut { offset: n * one }),
                    "cut at {cut}"
                );
            }
        }
    }

    #[test]
    fn garbage_stops_with_its_offset() {
        let mut bytes = file(3);
        let end = bytes.len();
        bytes.extend_from_slice(b"not a packet");
        let mut it = packets(&bytes);
        assert_eq!(it.by_ref().count(), 3);
        assert!(matches!(it.stop(), Some(Stop::Garbage { offset, .. }) if *offset == end));
    }
}
