// One vector step of transitions into the replay storage, at the step slot read on the device.
// The torch path is a dozen launches (casts, the done and timeout flags, one index copy per
// field); in a CUDA graph replayed every vector step each launch costs a few microseconds.
// Storage is [buffer_size, n_envs, ...] contiguous: the step's rows start at slot * n_envs.
// Thread k copies element k of the observation and next-observation rows (coalesced) and
// element k of the step's actions (action_dim per env: 1 for Discrete, K for MultiDiscrete);
// threads k < n_envs also write env k's reward, done and timeout. Thread 0 writes the step's
// first flat index to fill_start, where the tree's fill launch that follows reads it.

extern "C" __global__ void store_step(const long long* __restrict__ slot, long long n_envs,
                                      long long obs_dim, long long action_dim,
                                      const float* __restrict__ obs,
                                      const float* __restrict__ next_obs,
                                      const long long* __restrict__ action,
                                      const float* __restrict__ reward,
                                      const bool* __restrict__ terminated,
                                      const bool* __restrict__ truncated,
                                      float* __restrict__ obs_store,
                                      float* __restrict__ next_obs_store,
                                      long long* __restrict__ action_store,
                                      float* __restrict__ reward_store,
                                      float* __restrict__ done_store,
                                      float* __restrict__ timeout_store,
                                      long long* __restrict__ fill_start) {
    long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long row0 = slot[0] * n_envs;
    long long n_obs = n_envs * obs_dim;
    if (k < n_obs) {
        obs_store[row0 * obs_dim + k] = obs[k];
        next_obs_store[row0 * obs_dim + k] = next_obs[k];
    }
    if (k < n_envs * action_dim) action_store[row0 * action_dim + k] = action[k];
    if (k < n_envs) {
        bool term = terminated[k];
        bool trunc = truncated[k];
        reward_store[row0 + k] = reward[k];
        done_store[row0 + k] = (term || trunc) ? 1.0f : 0.0f;
        // A null timeout_store: the buffer does not keep timeouts (handle_timeout_termination off).
        if (timeout_store != nullptr) timeout_store[row0 + k] = (trunc && !term) ? 1.0f : 0.0f;
    }
    if (k == 0) fill_start[0] = row0;
}
