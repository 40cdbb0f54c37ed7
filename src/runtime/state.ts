import { OneUseGrantStore } from '../permissions/one-use-grants.js';
import { PolicySnapshotStore } from '../permissions/policy-snapshot.js';
import { StateKey } from '../project/state-key.js';

// capsule's per-user state folder as the parts that read and write it: its key, the confirmed policies and
// the one-use grants. Commands that need no runtime (reload, rules import, exec --grant-id, the hooks) open
// them here, so every process reads the same files with the same key. No other imports: the hook loads this.

/** The key that authenticates what capsule keeps in `stateDir` (read, or made, on first use). */
export function openStateKey(stateDir: string): StateKey {
  return new StateKey({ stateDir });
}

/** The policies a person confirmed, per project, kept in `stateDir` under its key. */
export function openPolicySnapshots(stateDir: string, key: StateKey): PolicySnapshotStore {
  return new PolicySnapshotStore({ stateDir, key });
}

/** One-use grants minted for one exact key (`capsule hook claude --confine`, spent by `capsule exec`). */
export function openOneUseGrants(stateDir: string, key: StateKey): OneUseGrantStore {
  return new OneUseGrantStore({ stateDir, key });
}
