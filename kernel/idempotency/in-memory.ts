import { setTimeout as sleep } from 'node:timers/promises';
import type { Id } from '../ids/index.js';
import type { InMemoryTransaction, InMemoryUnitOfWork } from '../txn/in-memory.js';
import {
  RequestInProgressError,
  type IdempotencyEntry,
  type IdempotencyRequest,
  type IdempotencyStore,
  type StoredResponse,
} from './index.js';

interface Row {
  sha256: Uint8Array;
  completed: boolean;
  response: StoredResponse | null;
  expiresAt: number;
  writer: InMemoryTransaction;
}

/**
 * An {@link IdempotencyStore} in memory, for fast unit tests of the HTTP
 * plugin. It models what the PostgreSQL store relies on: a row written by an
 * open transaction makes a second `begin` of the same key wait until that
 * transaction ends (up to the lock timeout, then RequestInProgressError), and
 * a rolled-back row disappears.
 */
export class InMemoryIdempotencyStore implements IdempotencyStore {
  private readonly rows = new Map<string, Row>();
  private waitingNow = 0;

  /** How many `take` and `begin` calls are waiting behind another open transaction right now. */
  waiting(): number {
    return this.waitingNow;
  }

  /**
   * @param uow the in-memory unit of work whose transactions writes join.
   * @param lockTimeoutMs how long `begin` waits for a key held by an open transaction.
   */
  constructor(
    private readonly uow: InMemoryUnitOfWork,
    private readonly lockTimeoutMs = 5000,
  ) {}

  /** Rows stored, for assertions. */
  size(): number {
    return this.rows.size;
  }

  /**
   * A row as stored, for assertions.
   *
   * @param principalId the principal.
   * @param key the key.
   * @returns its state and answer, or undefined.
   */
  peek(
    principalId: Id,
    key: Id,
  ): { completed: boolean; response: StoredResponse | null } | undefined {
    const row = this.rows.get(`${principalId}/${key}`);
    return row === undefined ? undefined : { completed: row.completed, response: row.response };
  }

  /**
   * @inheritdoc
   *
   * The store is memory: every committed, completed, unexpired row is known.
   */
  recall(principalId: Id, key: Id, now: Date): IdempotencyEntry | null {
    const row = this.rows.get(`${principalId}/${key}`);
    if (!row || !row.completed || row.writer.isOpen() || row.expiresAt <= now.getTime())
      return null;
    return entry(row);
  }

  /**
   * Waits, like PostgreSQL at the primary key, while another open
   * transaction holds the row of `id`.
   *
   * @returns the row once no other open transaction holds it, or undefined.
   * @throws RequestInProgressError after the lock timeout.
   */
  private async settled(id: string, tx: InMemoryTransaction): Promise<Row | undefined> {
    for (;;) {
      const row = this.rows.get(id);
      if (!row || !row.writer.isOpen() || row.writer === tx) return row;
      this.waitingNow++;
      const ended = await Promise.race([
        row.writer.ended.then(() => true),
        sleep(this.lockTimeoutMs, false),
      ]).finally(() => {
        this.waitingNow--;
      });
      if (!ended) throw new RequestInProgressError();
    }
  }

  private insert(id: string, req: IdempotencyRequest, tx: InMemoryTransaction): Row {
    const fresh: Row = {
      sha256: req.sha256,
      completed: false,
      response: null,
      expiresAt: req.now.getTime() + req.ttlMs,
      writer: tx,
    };
    this.rows.set(id, fresh);
    return fresh;
  }

  /**
   * @inheritdoc
   *
   * As in PostgreSQL, where the statement is sent before a savepoint the
   * caller opens next, the write belongs to the transaction at the point of
   * the call: its undo is registered before any wait.
   */
  take(req: IdempotencyRequest): Promise<boolean> {
    const tx = this.uow.current('taking an idempotency key');
    const id = `${req.principalId}/${req.key}`;
    let inserted: Row | undefined;
    tx.onRollback(() => {
      if (inserted !== undefined && this.rows.get(id) === inserted) this.rows.delete(id);
    });
    return (async () => {
      if ((await this.settled(id, tx)) !== undefined) return false;
      inserted = this.insert(id, req, tx);
      return true;
    })();
  }

  /** @inheritdoc */
  async begin(req: IdempotencyRequest): Promise<IdempotencyEntry | null> {
    const tx = this.uow.current('taking an idempotency key');
    const id = `${req.principalId}/${req.key}`;
    for (;;) {
      const row = await this.settled(id, tx);
      if (row && row.expiresAt <= req.now.getTime()) {
        this.rows.delete(id);
        tx.onRollback(() => this.rows.set(id, row));
        continue;
      }
      if (row) return entry(row);
      const fresh = this.insert(id, req, tx);
      tx.onRollback(() => {
        if (this.rows.get(id) === fresh) this.rows.delete(id);
      });
      return null;
    }
  }

  /**
   * @inheritdoc
   *
   * Like the PostgreSQL store, whose update travels with the COMMIT: the call
   * resolves, and a key not in progress in this transaction fails the commit.
   */
  completeAtCommit(req: IdempotencyRequest, res: StoredResponse): Promise<void> {
    const tx = this.uow.current('storing an idempotent answer');
    const row = this.rows.get(`${req.principalId}/${req.key}`);
    if (!row || row.writer !== tx || row.completed) {
      tx.failAtCommit(
        new Error(`no idempotency key in progress for ${req.key} in this transaction`),
      );
      return Promise.resolve();
    }
    const before = { completed: row.completed, response: row.response };
    row.completed = true;
    row.response = {
      status: res.status,
      body: structuredClone(res.body),
      resourceId: res.resourceId,
    };
    tx.onRollback(() => {
      row.completed = before.completed;
      row.response = before.response;
    });
    return Promise.resolve();
  }
}

function entry(row: Row): IdempotencyEntry {
  const r = row.response;
  return {
    sha256: row.sha256,
    completed: row.completed,
    status: r?.status ?? 0,
    body: r === null ? null : structuredClone(r.body),
    resourceId: r?.resourceId ?? null,
  };
}
