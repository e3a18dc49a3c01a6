//! placeholder until the config model lands
