//! Every in-tree plugin name, in one place, spelled as upstream. The
//! constants live with the configuration defaults (which name them too) and
//! are re-exported here for plugins.

pub use convoy_config::names::*;
