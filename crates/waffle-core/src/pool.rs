//! L1: the local pool. (Being written: sharded S3-FIFO with a byte budget.)
