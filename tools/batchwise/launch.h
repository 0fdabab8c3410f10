#pragma once
// `batchwise ... --nproc N`: this program started N times as the ranks of one torch.distributed
// group on this machine, as torchrun would start them, and waited for.
namespace batchwise::cli {

/// Whether this process is a rank started by launch_ranks (BATCHWISE_LAUNCHED is set).
bool launched_rank();

/// Starts `nproc` copies of this executable with the same arguments and torchrun's variables
/// (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free MASTER_PORT;
/// OMP_NUM_THREADS = cores / nproc unless set), forwards SIGINT/SIGTERM/SIGHUP to them, and
/// waits. When a rank fails, the others get `grace_s` to notice and end on their own, then are
/// killed. Returns the exit code: 0 when every rank succeeded, rank 0's when it failed with one,
/// otherwise `failed_code`. Prints one line per rank that failed.
int launch_ranks(int nproc, int argc, char** argv, double grace_s, int failed_code);

}  // namespace batchwise::cli
