//! A fixed-length array of unsigned integers of `width_bits` bits each (at most 32), packed
//! back to back in 64-bit words: the L2ARC index's table, where every bit is paid for once per
//! 4 KiB of cache device (docs/design/0005-l2arc-index.md).

/// Packed `width_bits`-bit values; value `i` occupies bits `[i * width, (i + 1) * width)` of
/// the little-endian bit string formed by the words.
#[derive(Debug)]
pub(crate) struct PackedArray {
    words: Vec<u64>,
    width_bits: u32,
    len: usize,
}

impl PackedArray {
    /// `len` zero values of `width_bits` bits (1..=32).
    pub(crate) fn zeroed(len: usize, width_bits: u32) -> Self {
        assert!((1..=32).contains(&width_bits), "packed width {width_bits} out of range");
        let bits = len as u64 * u64::from(width_bits);
        // One spare word so that a value straddling the last word boundary reads in bounds.
        let words = usize::try_from(bits.div_ceil(64) + 1).expect("index fits in memory");
        Self { words: vec![0; words], width_bits, len }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn width_bits(&self) -> u32 {
        self.width_bits
    }

    /// Bytes of memory the values occupy.
    pub(crate) fn memory_bytes(&self) -> u64 {
        self.words.len() as u64 * 8
    }

    fn mask(&self) -> u64 {
        (1u64 << self.width_bits) - 1
    }

    pub(crate) fn get(&self, i: usize) -> u32 {
        debug_assert!(i < self.len);
        let bit = i as u64 * u64::from(self.width_bits);
        let (word, shift) = ((bit / 64) as usize, (bit % 64) as u32);
        let low = self.words[word] >> shift;
        // A value crossing into the next word takes its high bits from there.
        let value = if shift + self.width_bits > 64 {
            low | (self.words[word + 1] << (64 - shift))
        } else {
            low
        };
        (value & self.mask()) as u32
    }

    pub(crate) fn set(&mut self, i: usize, value: u32) {
        debug_assert!(i < self.len);
        let mask = self.mask();
        debug_assert!(
            u64::from(value) <= mask,
            "value {value} wider than {} bits",
            self.width_bits
        );
        let value = u64::from(value) & mask;
        let bit = i as u64 * u64::from(self.width_bits);
        let (word, shift) = ((bit / 64) as usize, (bit % 64) as u32);
        self.words[word] = (self.words[word] & !(mask << shift)) | (value << shift);
        if shift + self.width_bits > 64 {
            let spill = 64 - shift;
            self.words[word + 1] = (self.words[word + 1] & !(mask >> spill)) | (value >> spill);
        }
    }

    /// Sets every value to zero.
    pub(crate) fn clear(&mut self) {
        self.words.fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_at_every_width_and_do_not_touch_neighbours() {
        for width in 1..=32u32 {
            let n = 200;
            let mut a = PackedArray::zeroed(n, width);
            let max = if width == 32 { u32::MAX } else { (1u32 << width) - 1 };
            let value = |i: usize| (i as u32).wrapping_mul(2_654_435_761) & max;
            for i in 0..n {
                a.set(i, value(i));
            }
            for i in 0..n {
                assert_eq!(a.get(i), value(i), "width {width} index {i}");
            }
            a.set(77, 0);
            assert_eq!((a.get(76), a.get(77), a.get(78)), (value(76), 0, value(78)));
            a.set(77, max);
            assert_eq!((a.get(76), a.get(77), a.get(78)), (value(76), max, value(78)));
        }
    }

    #[test]
    fn memory_is_the_packed_bits_plus_one_word() {
        let a = PackedArray::zeroed(1000, 29);
        assert_eq!(a.memory_bytes(), (29_000u64.div_ceil(64) + 1) * 8);
        assert_eq!((a.len(), a.width_bits()), (1000, 29));
    }
}
