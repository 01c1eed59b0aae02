/**
 * Provisioning: create the stream and buckets an agentlog deployment needs, with the settings
 * `agentlog provision` uses, when they are missing.
 */
import type { NatsConnection } from '@nats-io/transport-node'
import {
  DiscardPolicy, RetentionPolicy, StorageType, StoreCompression,
  type JetStreamManager, type StreamConfig,
} from '@nats-io/jetstream'
import type { NamesConfig, ProvisionConfig } from './config.js'
import { isStreamNotFound } from './errors.js'
import { DEFAULT_PARTITIONS, META_FORMAT, META_PARTITIONS, PROJECTIONS_BUCKET, SESSIONS_BUCKET, STORE_FORMAT } from './wire.js'

/**
 * Create what is missing with `agentlog provision`'s settings; existing ones are kept as they are.
 * The writer leases bucket is created only when `leases`. A create that loses a race with another
 * provisioner passes when the stream exists afterwards.
 */
export async function provision(nc: NatsConnection, jsm: JetStreamManager, n: Required<NamesConfig>, p: ProvisionConfig, leases: boolean): Promise<void> {
  const replicas = p.replicas ?? 1
  const maxPayload = nc.info?.max_payload ?? 1 << 20
  const exists = async (name: string) => jsm.streams.info(name).then(() => true, (err: unknown) => {
    if (isStreamNotFound(err)) return false
    throw err
  })
  if (!await exists(n.stream)) {
    const cfg: Partial<StreamConfig> & { name: string } = {
      name: n.stream,
      description: 'agentlog session logs: one subject per session, one record (1..K events) per message',
      subjects: [`${n.subjectPrefix}.>`],
      retention: RetentionPolicy.Limits,
      max_consumers: -1, max_msgs: -1, max_bytes: -1, max_msgs_per_subject: -1,
      discard: DiscardPolicy.Old,
      max_msg_size: Math.min(p.maxMsgSize ?? 1 << 20, maxPayload),
      storage: StorageType.File,
      num_replicas: replicas,
      duplicate_window: 120_000_000_000,
      allow_direct: true,
      deny_delete: true,
      compression: StoreCompression.S2,
      allow_atomic: true,
      metadata: { [META_PARTITIONS]: String(p.partitions ?? DEFAULT_PARTITIONS), [META_FORMAT]: STORE_FORMAT },
    }
    await jsm.streams.add(cfg).catch(async (err: unknown) => { if (!await exists(n.stream)) throw err })
  }
  // KV buckets as @nats-io/kv makes them, except that they refuse rollup headers (store/provision.go
  // kvStreamConfig): a put with `Nats-Rollup: all` on one key would purge every key. The leases'
  // per-key TTLs are allowed without the markers of expired keys (the server keeps those only with
  // rollups allowed).
  const kvStream = (bucket: string, ttls: boolean): Partial<StreamConfig> & { name: string } => ({
    name: `KV_${bucket}`,
    subjects: [`$KV.${bucket}.>`],
    retention: RetentionPolicy.Limits,
    max_msgs_per_subject: 1, max_msgs: -1, max_bytes: -1, max_msg_size: -1, max_consumers: -1, max_age: 0,
    storage: StorageType.File, num_replicas: replicas,
    allow_rollup_hdrs: false, deny_delete: true, deny_purge: false,
    duplicate_window: 120_000_000_000, allow_direct: true, discard: DiscardPolicy.New,
    ...ttls ? { allow_msg_ttl: true } : {},
  })
  const buckets: Array<[string, boolean]> = [
    ...leases ? [[n.writersBucket, true] as [string, boolean]] : [],
    [n.sessionsBucket, false],
    ...n.sessionsBucket === SESSIONS_BUCKET ? [[PROJECTIONS_BUCKET, false] as [string, boolean]] : [],
  ]
  for (const [bucket, ttls] of buckets) {
    if (!await exists(`KV_${bucket}`)) {
      await jsm.streams.add(kvStream(bucket, ttls)).catch(async (err: unknown) => {
        if (!await exists(`KV_${bucket}`)) throw err
      })
    }
  }
  if (!await exists(n.errorsStream)) {
    const cfg: Partial<StreamConfig> & { name: string } = {
      name: n.errorsStream,
      description: 'agentlog agent/error reports (kept for inspection, never session events)',
      subjects: [`${n.errorsPrefix}.>`],
      retention: RetentionPolicy.Limits, max_consumers: -1, max_msgs: -1,
      max_bytes: 256 << 20, max_age: 7 * 24 * 3600 * 1e9, max_msgs_per_subject: 1000,
      discard: DiscardPolicy.Old, storage: StorageType.File, num_replicas: replicas, allow_direct: true,
    }
    await jsm.streams.add(cfg).catch(async (err: unknown) => { if (!await exists(n.errorsStream)) throw err })
  }
  if (!await exists(n.blobStream)) {
    // Write-once (store/blob.go blobStreamConfig): one message per subject, discard new per
    // subject, so a chunk once stored can never be overwritten or appended to.
    const cfg: Partial<StreamConfig> & { name: string } = {
      name: n.blobStream,
      description: 'agentlog offloaded events: agentlog.blob.<token>.<blob id>.<chunk>, write-once chunks of events larger than one record',
      subjects: [`${n.blobPrefix}.>`],
      retention: RetentionPolicy.Limits, max_consumers: -1, max_msgs: -1, max_bytes: -1, max_msgs_per_subject: 1,
      discard: DiscardPolicy.New, discard_new_per_subject: true, storage: StorageType.File, num_replicas: replicas,
      allow_direct: true, deny_delete: true, compression: StoreCompression.S2,
    }
    await jsm.streams.add(cfg).catch(async (err: unknown) => { if (!await exists(n.blobStream)) throw err })
  }
}
