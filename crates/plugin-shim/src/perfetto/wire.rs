//! Protobuf bytes written by hand for the packets every record makes (a
//! slice begin and a slice end), in exactly the form prost gives the same
//! messages (`evring_perfetto::proto`): fields in tag order, shortest
//! varints, unpacked repeated fields. prost builds a message struct per
//! packet and per annotation and walks each nested message twice (once for
//! its length, once to write it); here each byte is written once.
//!
//! The tests check the equivalence: a file decoded by prost and encoded
//! again is the same bytes (`perfetto/tests.rs`).

/// Wire types.
const VARINT: u32 = 0;
const I64: u32 = 1;
const LEN: u32 = 2;

/// A field's key (`tag << 3 | wire type`) as its varint bytes, built at
/// compile time: at most 2 bytes for the tags used here (< 2048).
#[derive(Clone, Copy)]
pub(crate) struct FieldKey {
    bytes: [u8; 2],
    len: u8,
}

impl FieldKey {
    const fn new(tag: u32, wire: u32) -> FieldKey {
        let k = tag << 3 | wire;
        assert!(k < 1 << 14);
        if k < 0x80 {
            FieldKey {
                bytes: [k as u8, 0],
                len: 1,
            }
        } else {
            FieldKey {
                bytes: [(k as u8) | 0x80, (k >> 7) as u8],
                len: 2,
            }
        }
    }
}

/// `Trace.packet`.
pub(crate) const TRACE_PACKET: FieldKey = FieldKey::new(1, LEN);
/// `TracePacket` fields.
pub(crate) const PKT_TIMESTAMP: FieldKey = FieldKey::new(8, VARINT);
pub(crate) const PKT_SEQUENCE_ID: FieldKey = FieldKey::new(10, VARINT);
pub(crate) const PKT_TRACK_EVENT: FieldKey = FieldKey::new(11, LEN);
pub(crate) const PKT_CLOCK_ID: FieldKey = FieldKey::new(58, VARINT);
/// `TrackEvent` fields.
pub(crate) const EV_CATEGORY_IID: FieldKey = FieldKey::new(3, VARINT);
pub(crate) const EV_ANNOTATION: FieldKey = FieldKey::new(4, LEN);
pub(crate) const EV_TYPE: FieldKey = FieldKey::new(9, VARINT);
pub(crate) const EV_NAME_IID: FieldKey = FieldKey::new(10, VARINT);
pub(crate) const EV_TRACK_UUID: FieldKey = FieldKey::new(11, VARINT);
pub(crate) const EV_FLOW_ID: FieldKey = FieldKey::new(47, I64);
pub(crate) const EV_TERMINATING_FLOW_ID: FieldKey = FieldKey::new(48, I64);
/// `DebugAnnotation` fields.
const ANN_NAME_IID: FieldKey = FieldKey::new(1, VARINT);
pub(crate) const ANN_BOOL: FieldKey = FieldKey::new(2, VARINT);
pub(crate) const ANN_UINT: FieldKey = FieldKey::new(3, VARINT);
pub(crate) const ANN_INT: FieldKey = FieldKey::new(4, VARINT);
pub(crate) const ANN_POINTER: FieldKey = FieldKey::new(7, VARINT);
pub(crate) const ANN_STRING_IID: FieldKey = FieldKey::new(17, VARINT);

/// Bytes of a varint of `v`.
#[inline]
pub(crate) fn varint_len(v: u64) -> usize {
    // 1 + (bits above the lowest 7) / 7, rounded up: ((64 - lz) * 9 + 64) / 64
    // is prost's formula for the same.
    ((((v | 1).leading_zeros() ^ 63) * 9 + 73) / 64) as usize
}

/// A writer into a buffer, at `n`, front to back. The caller makes the
/// buffer long enough for what it writes (a write past its end panics, it
/// never corrupts). A slice, not a `Vec`: its pointer and length stay in
/// registers while bytes are stored through it.
pub(crate) struct Wr<'a> {
    pub(crate) b: &'a mut [u8],
    pub(crate) n: usize,
}

impl Wr<'_> {
    #[inline(always)]
    pub(crate) fn byte(&mut self, x: u8) {
        self.b[self.n] = x;
        self.n += 1;
    }

    #[inline(always)]
    pub(crate) fn key(&mut self, k: FieldKey) {
        // `k` is a constant wherever this is inlined: one store or two.
        self.b[self.n] = k.bytes[0];
        if k.len == 2 {
            self.b[self.n + 1] = k.bytes[1];
        }
        self.n += k.len as usize;
    }

    #[inline(always)]
    pub(crate) fn varint(&mut self, mut v: u64) {
        if v < 0x80 {
            return self.byte(v as u8);
        }
        let b = &mut self.b[self.n..self.n + 10];
        let mut i = 0;
        while v >= 0x80 {
            b[i] = v as u8 | 0x80;
            v >>= 7;
            i += 1;
        }
        b[i] = v as u8;
        self.n += i + 1;
    }

    #[inline(always)]
    pub(crate) fn bytes(&mut self, s: &[u8]) {
        self.b[self.n..self.n + s.len()].copy_from_slice(s);
        self.n += s.len();
    }

    /// A varint field.
    #[inline(always)]
    pub(crate) fn uint(&mut self, k: FieldKey, v: u64) {
        self.key(k);
        self.varint(v);
    }

    /// A fixed64 field.
    #[inline(always)]
    pub(crate) fn fixed64(&mut self, k: FieldKey, v: u64) {
        self.key(k);
        self.bytes(&v.to_le_bytes());
    }

    /// A `TrackEvent.debug_annotations` entry: its key's interned id and
    /// one varint value (`value`: the value's field). Its body is at most
    /// 1 + 10 + 2 + 10 bytes, so its length is one byte.
    #[inline(always)]
    pub(crate) fn annotation(&mut self, name_iid: u64, value: FieldKey, v: u64) {
        self.key(EV_ANNOTATION);
        let at = self.n;
        self.n += 1;
        self.key(ANN_NAME_IID);
        self.varint(name_iid);
        self.key(value);
        self.varint(v);
        self.b[at] = (self.n - at - 1) as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_lengths_and_keys_match_prost() {
        for v in (0..64)
            .flat_map(|s| [1u64 << s, (1u64 << s) - 1, (1u64 << s) + 1])
            .chain([0, u64::MAX])
        {
            assert_eq!(varint_len(v), prost::encoding::encoded_len_varint(v), "{v}");
            let mut a = [0u8; 16];
            let mut w = Wr { b: &mut a, n: 0 };
            w.varint(v);
            let n = w.n;
            let mut p = Vec::new();
            prost::encoding::encode_varint(v, &mut p);
            assert_eq!(&a[..n], &p[..], "{v}");
        }
        for (tag, wire, k) in [
            (1, prost::encoding::WireType::LengthDelimited, TRACE_PACKET),
            (58, prost::encoding::WireType::Varint, PKT_CLOCK_ID),
            (47, prost::encoding::WireType::SixtyFourBit, EV_FLOW_ID),
            (17, prost::encoding::WireType::Varint, ANN_STRING_IID),
        ] {
            let mut p = Vec::new();
            prost::encoding::encode_key(tag, wire, &mut p);
            assert_eq!(&k.bytes[..k.len as usize], &p[..]);
        }
    }
}
