// The rotary embedding's arithmetic, shared by every kernel that rotates (rope.comp, and the
// rotations folded into matvec.comp's q/k/v product and norm.comp's QK norm), so that all of
// them give one set of bits. PAIRING 0 pairs element i of a head with i + hd/2 (rotate-half), 1
// pairs 2i with 2i + 1 (interleaved); pair i turns by the table's (cos, sin) of frequency i.

// The pair (x0, its partner x1) rotated by cs. precise: no compiler may contract these into
// fused multiply-adds in one kernel and not in another.
vec2 rope_rotate(float x0, float x1, vec2 cs) {
  precise float a = x0 * cs.x - x1 * cs.y;
  precise float b = x1 * cs.x + x0 * cs.y;
  return vec2(a, b);
}

// Where element e of a head of head_dim sits in its pair.
struct RopeSlot {
  uint freq;     // the pair's frequency index
  uint partner;  // the other element of the pair
  bool first;    // e is the pair's first element
};
RopeSlot rope_slot(uint e, uint head_dim, uint pairing) {
  uint half_dim = head_dim / 2u;
  bool first = pairing == 0u ? e < half_dim : (e & 1u) == 0u;
  uint freq = pairing == 0u ? (first ? e : e - half_dim) : e / 2u;
  uint partner = pairing == 0u ? (first ? e + half_dim : e - half_dim) : e ^ 1u;
  return RopeSlot(freq, partner, first);
}

// Element `self` after the rotation, from its partner's value `other`.
float rope_rotated(float self, float other, bool first, vec2 cs) {
  return first ? rope_rotate(self, other, cs).x : rope_rotate(other, self, cs).y;
}
