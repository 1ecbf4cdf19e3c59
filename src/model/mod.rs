//! The DS4 tensor map: per layer the routed expert tensors and their per-expert slices, the
//! router / tid2eid / shared-expert tensors, and the resident (non-routed) tensors.
//! PLACEHOLDER (skeleton): lands with the foundation issue.
