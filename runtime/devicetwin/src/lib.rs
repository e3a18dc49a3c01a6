//! DeviceTwin (in progress).
