//! Membership: devices joining and leaving the node, get and detail.
