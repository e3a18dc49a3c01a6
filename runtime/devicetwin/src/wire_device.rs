//! Wire JSON of devices, attributes and membership messages.
