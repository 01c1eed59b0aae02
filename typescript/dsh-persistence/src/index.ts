/**
 * agentlog session persistence for the DeepSeek Harness (dsh): a `SessionPersistence` backend that
 * stores every session as one subject of the agentlog JetStream stream, in agentlog's wire format
 * (docs/PROTOCOL.md), so that the Go stack (`agentlog events`, `messages`, `fork`, the projector)
 * reads what dsh writes and dsh loads what the Go stack writes.
 *
 * This module is the package's public surface. The record codec is `@agentlog/dsh-session-persistence/wire`.
 * @module @agentlog/dsh-session-persistence
 */
import { AgentlogSessionPersistence } from './backend.js'

export { AgentlogSessionPersistence }
export { DEFAULT_LEASE_TTL_MS, type Config, type NamesConfig, type ProvisionConfig, type TlsConfig } from './config.js'
export { AgentlogAckedLostError, AgentlogConflictError, AgentlogLeaseHeldError } from './errors.js'
export { AgentlogArchiveCorruptError, ARCHIVE_STREAM, ARCHIVE_PREFIX, restoreMsgId } from './archive.js'
export { AgentlogMetrics, type MetricsConfig } from './metrics.js'
// The names and addresses of a deployment, and the types the backend's events and headers have.
export {
  AgentlogWireError, BLOBS_BUCKET, DEFAULT_MAX_EVENT_BYTES, DEFAULT_PARTITIONS, ERRORS_PREFIX, ERRORS_STREAM,
  PROJECTIONS_BUCKET, SESSIONS_BUCKET, STREAM_NAME, SUBJECT_PREFIX, WRITERS_BUCKET,
  errorsSubject, idFromToken, partition, sessionSubject, token,
  type WireEvent, type WireHeader,
} from './wire.js'

export default AgentlogSessionPersistence
