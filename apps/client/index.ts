/**
 * The client library's public face: the durable outbox, the sender that
 * drains it with the retry policy of docs/api/README.md, the typed ledger
 * intents and the command line's runner. It imports nothing of the server:
 * its types come from the API document (api-types.ts, generated).
 *
 * @packageDocumentation
 */
export {
  Outbox,
  OutboxError,
  OutboxOpenError,
  OutboxLockedError,
  OutboxCorruptError,
  OutboxPrincipalError,
  OutboxDamagedError,
  IntentConflictError,
  storageError,
  newKey,
  checkKey,
  type Intent,
  type IntentState,
  type FailureReason,
  type NewIntent,
  type RecordedAnswer,
  type FinalRecord,
  type OutboxOptions,
  type StorageSettings,
  type WriteMethod,
} from './outbox.js';
export {
  Sender,
  type SenderOptions,
  type SendEvent,
  type DrainOptions,
  type DrainReport,
  type StopReason,
} from './sender.js';
export {
  classifyAnswer,
  parseRetryAfter,
  parseHttpDate,
  backoffDelay,
  STORED_ERROR_STATUSES,
  type AnswerClass,
  type AnswerFacts,
  type BackoffSettings,
} from './retry.js';
export {
  LedgerClient,
  EqualIntentError,
  intentVerdict,
  transferIntent,
  accountIntent,
  answerBody,
  mayHaveTakenEffect,
  type LedgerClientOptions,
  type IntentOptions,
  type StateOptions,
  type Verdict,
  type TransferOptions,
  type TransferRequest,
  type Transfer,
  type AccountRequest,
  type Account,
  type Problem,
} from './client.js';
export {
  runCli,
  parseCommandLine,
  parseDuration,
  EXIT,
  USAGE,
  UsageError,
  type Command,
  type CommonSettings,
  type SendSettings,
  type Environment,
  type Output,
} from './cli.js';
export { intentJson, eventJson, type IntentJson } from './cli-output.js';
export { silenceSqliteExperimentalWarning, isSqliteExperimentalWarning } from './warnings.js';
