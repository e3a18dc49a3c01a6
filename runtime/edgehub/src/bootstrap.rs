//! Certificate bootstrap from a join token, and rotation.
