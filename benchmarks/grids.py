"""The grids of run_all.py's parts: batch x bytes cells, block sizes, the scaling sweeps and
their limits, and the tiny sizes of --quick."""

# Grids. The three issue-4 target cells come first in PEER_GRID.
PEER_GRID = [(64, 512), (1024, 512), (1024, 4096), (256, 512), (1024, 128), (1024, 2048), (64, 4096)]
PAPER_BLOCKS = (256, 512, 1024)
PAPER_BATCHES = (64, 128, 256, 512, 1024)
PAPER_LENGTHS = (128, 256, 512, 1024, 2048, 4096)
SCALE_LENGTHS = (128, 512, 2048, 8192, 16384, 65536, 262144, 1 << 20)
SCALE_LENGTH_BATCHES = (1, 64)
SCALE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
SCALE_BATCH_LEN = 512
SCALE_MAX_TOTAL_BYTES = 16 << 20  # cap on batch x length for one call in the scaling sweeps
SLOW_CALL_S = 2.0  # a series stops growing past a call this slow
BYTES_CHECK_BYTES = 2 << 20  # tiktoken with one piece per string is superlinear: check
# only the first rows of long bytes-mode strings (>= 1 row)

QUICK = dict(
    peer_grid=[(8, 128), (16, 512)],
    paper_blocks=(256, 1024),
    paper_batches=(4, 8),
    paper_lengths=(128, 256),
    scale_lengths=(128, 1024, 9000),
    scale_length_batches=(1, 2),
    scale_batches=(1, 4, 16),
    scale_batch_len=128,
)
