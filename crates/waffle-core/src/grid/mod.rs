//! L2: the memcached grid client. (Being written.)
