/** Sign-in by pasted API key: the key lives in this browser's localStorage, never in a URL. */
import { createContext, useCallback, useContext, useEffect, useMemo, useState, type ReactNode } from "react";

import { ApiError, bindApi, describeError, request, type Api } from "../api/client";
import type { components } from "../api/openapi";

const STORAGE_KEY = "parley.apiKey";

/** What `GET /v1/me` says about the key (its type generated from docs/openapi.json). */
export type Me = components["schemas"]["Me"];

interface Session {
  key: string;
  me: Me;
  api: Api;
  signOut: (reason?: string) => void;
  /** The key carries `scope` (an `admin` key carries every scope). */
  allows: (scope: string) => boolean;
  /** The key may create, run or delete under `scope` (a `readonly` key may only read). */
  writes: (scope: string) => boolean;
}

const SessionContext = createContext<Session | null>(null);

export function useSession(): Session {
  const session = useContext(SessionContext);
  if (!session) throw new Error("useSession outside <SessionProvider>");
  return session;
}

export function useApi(): Api {
  return useSession().api;
}

function readStoredKey(): string | null {
  try {
    return window.localStorage.getItem(STORAGE_KEY);
  } catch {
    return null;
  }
}

/** Check a key against the server: its identity, or an error saying why it was refused. */
async function checkKey(key: string): Promise<Me> {
  return request<Me>(key, "/v1/me");
}

export function SessionProvider({ children }: { children: ReactNode }) {
  const [key, setKey] = useState<string | null>(readStoredKey);
  const [me, setMe] = useState<Me | null>(null);
  const [notice, setNotice] = useState<string | null>(null);

  const signOut = useCallback((reason?: string) => {
    window.localStorage.removeItem(STORAGE_KEY);
    setKey(null);
    setMe(null);
    setNotice(reason ?? null);
  }, []);

  useEffect(() => {
    if (!key || me) return;
    let live = true;
    checkKey(key).then(
      (who) => live && setMe(who),
      (error) => {
        if (!live) return;
        if (error instanceof ApiError && error.status === 401) signOut("The saved key is no longer accepted; sign in again.");
        else setNotice(`Could not reach Parley: ${describeError(error)}`);
      },
    );
    return () => {
      live = false;
    };
  }, [key, me, signOut]);

  const session = useMemo<Session | null>(() => {
    if (!key || !me) return null;
    const api = bindApi(key);
    const admin = me.scopes.includes("admin");
    const allows = (scope: string) => admin || me.scopes.includes(scope);
    const writes = (scope: string) => admin || (me.scopes.includes(scope) && !me.scopes.includes("readonly"));
    return { key, me, api, signOut, allows, writes };
  }, [key, me, signOut]);

  if (!session) {
    if (key && !notice) return <p className="loading" role="status">Checking your key…</p>;
    return (
      <SignIn
        notice={notice}
        onSignedIn={(newKey, who) => {
          window.localStorage.setItem(STORAGE_KEY, newKey);
          setNotice(null);
          setMe(who);
          setKey(newKey);
        }}
      />
    );
  }
  return <SessionContext.Provider value={session}>{children}</SessionContext.Provider>;
}

function SignIn({ notice, onSignedIn }: { notice: string | null; onSignedIn: (key: string, me: Me) => void }) {
  const [draft, setDraft] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  async function submit(event: React.FormEvent) {
    event.preventDefault();
    const key = draft.trim();
    if (!key) {
      setError("Paste an API key first.");
      return;
    }
    setBusy(true);
    setError(null);
    try {
      onSignedIn(key, await checkKey(key));
    } catch (err) {
      setError(
        err instanceof ApiError && err.status === 401
          ? "That key was not accepted: it is unknown or has been revoked."
          : `Could not sign in: ${describeError(err)}`,
      );
    } finally {
      setBusy(false);
    }
  }

  return (
    <main className="signin" id="main">
      <h1>Parley Studio</h1>
      <p>Start, watch, read and design multi-agent debates.</p>
      <form onSubmit={submit} className="card">
        <label htmlFor="api-key">API key</label>
        <input
          id="api-key"
          type="password"
          autoComplete="off"
          spellCheck={false}
          value={draft}
          onChange={(e) => setDraft(e.target.value)}
          aria-describedby="api-key-help"
          aria-invalid={error ? true : undefined}
        />
        <p id="api-key-help" className="hint">
          <code>make run</code> prints a key when it starts on an empty database; or create one with{" "}
          <code>parley keys create --user you --workspace team --scopes admin</code>. The key is kept in this
          browser only.
        </p>
        <button type="submit" disabled={busy}>
          {busy ? "Checking…" : "Sign in"}
        </button>
        {(error || notice) && (
          <p role="alert" className="error">
            {error ?? notice}
          </p>
        )}
      </form>
    </main>
  );
}
