// The rows and weights of a GEMM block (gemm.comp, gemm_coopmat.comp; included after their push
// constants). Plain: rows 0..M-1 of x and y, and W [N, K]. ROW_IDS (mixture-of-experts
// prefills): workgroup z serves bound expert z, its rows those of its list (binding 3, made by
// ops::group_rows_by_expert: lists[base] rows, then their ids in ascending order), y row r / slots
// for row r, stored only for r % slots == slot, and W that expert's, [N, K] or, K_MAJOR, [K, N].
uint row_count;    // rows of the product: M, or the length of the expert's list
uint w_byte_base;  // where the expert's weights start in the binding (0 without ROW_IDS)
#if defined(ROW_IDS)
uint list_base;
// Sets the block's rows; false when the block starts past them (the whole workgroup returns).
bool block_rows_begin(uint m0) {
  list_base = p.lists_offset + (p.expert_base + gl_WorkGroupID.z) * p.list_stride;
  row_count = uint(lists[list_base]);
  w_byte_base = gl_WorkGroupID.z * p.expert_stride;
  return m0 < row_count;
}
uint x_row(uint m) { return uint(lists[list_base + 1u + m]); }  // m < row_count
uint y_row(uint m) { return x_row(m) / p.slots; }
bool row_stored(uint m) { return m < row_count && x_row(m) % p.slots == p.slot; }
bool w_k_major() { return K_MAJOR; }
#else
bool block_rows_begin(uint m0) {
  row_count = p.M;
  w_byte_base = 0u;
  return true;
}
uint x_row(uint m) { return m; }
uint y_row(uint m) { return m; }
bool row_stored(uint m) { return m < p.M; }
bool w_k_major() { return false; }
#endif

#if !defined(W_QUANT)
#if defined(W_F32)
#define W_ELEM_BYTES 4u
#else
#define W_ELEM_BYTES 2u
#endif
// Element (n, k) of W.
uint w_index(uint n, uint k) { return w_byte_base / W_ELEM_BYTES + (w_k_major() ? k * p.N + n : n * p.K + k); }
// Elements [k, k + 8) of W's row n (k % 8 == 0): one 16-byte load where rows run along k.
void wload8_at(uint n, uint k, out float w[8]) {
  if (w_k_major()) {
    [[unroll]] for (uint i = 0; i < 8; ++i) w[i] = wload(w_index(n, k + i));
  } else {
    wload8(w_index(n, k) >> 3, w);
  }
}
#endif
