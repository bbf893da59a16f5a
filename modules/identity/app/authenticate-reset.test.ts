/**
 * A token read that meets a connection reset is a database failure, never
 * "no such token": a client told 401 stops and asks its user for a new
 * token, though its token is valid. The read here is made in the window a
 * reset opens (test/harness/reset-window.ts): our pool has it hear the
 * reset, and where the driver hears the reset before the close (its own
 * sockets, a pool over a host list or TLS) postgres.js 3.4.9 settles it with an empty
 * result, which the read refuses.
 */
import t from 'tap';
import { ManualClock } from '../../../kernel/clock/index.js';
import { PgDatabase } from '../../../platform/pg/uow.js';
import { testDatabase } from '../../../test/harness/db.js';
import { resettablePool } from '../../../test/harness/reset-window.js';
import { testUnitOfWork } from '../../../test/harness/uow.js';
import { PgApiTokenRepository } from '../adapters/postgres/api-tokens.js';
import { PgPrincipalRepository } from '../adapters/postgres/principals.js';
import { IdentityService } from './identity-service.js';

for (const bare of [false, true]) {
  void t.test(
    `a token read cut by a connection reset fails, never answers "no such token" (${bare ? "the driver's own sockets" : 'our pool'})`,
    async (t) => {
      const tdb = await testDatabase(t);
      const clock = new ManualClock('2030-01-01T00:00:00.000Z');
      const { db, uow } = testUnitOfWork(t, tdb, { applicationName: 'authenticate-reset' });
      const issuer = new IdentityService({
        uow,
        clock,
        principals: new PgPrincipalRepository(db),
        tokens: new PgApiTokenRepository(db),
      });
      const created = await issuer.createPrincipal({ kind: 'service', displayName: 'Reset' });
      const { sql, reset } = resettablePool(t, tdb.appUrl, 1, { bare });
      const resettable = new PgDatabase(sql);
      const service = new IdentityService({
        uow,
        clock,
        principals: new PgPrincipalRepository(resettable),
        tokens: new PgApiTokenRepository(resettable),
      });
      const before = await service.authenticate(created.token.token, clock.now());
      t.equal(before?.principalId, created.principal.id, 'the token authenticates');
      let read: Promise<unknown> | undefined;
      await reset(() => {
        read = service.authenticate(created.token.token, clock.now());
      });
      // The next statement reconnects the connection, which settles the read.
      const after = service.authenticate(created.token.token, clock.now());
      const outcome = await read!.then(
        (actor) => `answered ${JSON.stringify(actor)}`,
        (err: unknown) => `failed ${String((err as { code?: unknown }).code)}`,
      );
      t.equal(
        outcome,
        bare ? 'failed RESULT_UNANSWERED' : 'failed ECONNRESET',
        'a failure the server answers 503, not 401',
      );
      t.equal((await after)?.principalId, created.principal.id, 'and the next read authenticates');
    },
  );
}
