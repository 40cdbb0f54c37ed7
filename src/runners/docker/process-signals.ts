/**
 * On SIGINT or SIGTERM, run `cleanup` (remove a runner's containers) and then raise the same signal again,
 * so the process still ends the way it was asked to and nothing of it is left on the engine. Returns the
 * function that detaches the handlers (a closed runner no longer holds the process's signals).
 */
export function cleanupOnProcessSignals(cleanup: () => Promise<void>): () => void {
  const detach = (): void => {
    process.removeListener('SIGINT', handler);
    process.removeListener('SIGTERM', handler);
  };
  const handler = (signal: NodeJS.Signals): void => {
    detach();
    void cleanup().finally(() => process.kill(process.pid, signal));
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
  return detach;
}
