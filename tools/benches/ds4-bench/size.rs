//! Byte sizes on the command line: the library's parser (`ds4_stream::units`), shared with `ds4`
//! and `ds4-stress`.

pub use ds4_stream::units::{parse_size, Size};
