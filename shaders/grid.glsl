// The flat invocation index of a one-dimensional kernel launched on a two-dimensional grid
// (ops::linear_grid folds what exceeds maxComputeWorkGroupCount.x into y). Invocations past
// the end exist in the last row of groups; kernels compare the index with their count.
uint linear_invocation() {
  return (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
}
