/**
 * The API's limits that a form offers before it asks. A duel's rounds: the bounds are DebateBody.rounds'
 * (docs/openapi.json) and core/limits.py's MIN_DUEL_ROUNDS and MAX_DUEL_ROUNDS; the default is DEFAULT_DUEL_ROUNDS,
 * the one the API and the CLI use when a request names none (the schema says only "the default when omitted").
 * tests/studio/test_duel.py checks the form against all of them.
 */
export const DUEL_ROUNDS = { min: 1, max: 10, default: 5 } as const;

/** A council chosen per request (ChatCompletionRequest.models and .criteria): core/limits.py's MIN_PANEL_SIZE,
 * MAX_PANEL_SIZE and MAX_CRITERIA_CHARS; tests/studio/test_panel.py checks the form against them. */
export const PANEL_SIZE = { min: 2, max: 8 } as const;
export const CRITERIA_CHARS = 2000;
