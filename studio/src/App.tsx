/** The Studio's frame: navigation between the five areas, who is signed in, and the routes. */
import { lazy, Suspense } from "react";
import { Navigate, NavLink, Route, Routes } from "react-router";

import { useSession } from "./session/session";
import { DuelPage, DuelRecordPage } from "./views/duel/DuelPage";
import { PanelPage } from "./views/panel/PanelPage";
import { HistoryPage } from "./views/history/HistoryPage";

// The canvas and the chart library are the heaviest parts: loaded when their area is opened.
const RoundTablePage = lazy(() => import("./views/roundtable/RoundTablePage"));
const ConversationPage = lazy(() => import("./views/roundtable/ConversationPage"));
const DesignerPage = lazy(() => import("./views/designer/DesignerPage"));
const ReplayPage = lazy(() => import("./views/history/ReplayPage"));

const AREAS = [
  { to: "/duel", label: "Duel" },
  { to: "/panel", label: "Panel" },
  { to: "/roundtable", label: "Round table" },
  { to: "/designer", label: "Designer" },
  { to: "/history", label: "History" },
];

export function App() {
  const { me, signOut } = useSession();
  return (
    <>
      <a className="skip" href="#main">
        Skip to content
      </a>
      <header className="topbar">
        <span className="brand">Parley Studio</span>
        <nav aria-label="Areas">
          <ul>
            {AREAS.map((area) => (
              <li key={area.to}>
                <NavLink to={area.to}>{area.label}</NavLink>
              </li>
            ))}
          </ul>
        </nav>
        <div className="who">
          <span title={`Scopes: ${me.scopes.join(", ")}`}>
            {me.user} · {me.workspace}
          </span>
          <button type="button" className="quiet" onClick={() => signOut()}>
            Sign out
          </button>
        </div>
      </header>
      <main id="main" tabIndex={-1}>
        <Suspense fallback={<p role="status">Loading…</p>}>
          <Routes>
            <Route path="/" element={<Navigate to="/duel" replace />} />
            <Route path="/duel" element={<DuelPage />} />
            <Route path="/duel/:id" element={<DuelRecordPage />} />
            <Route path="/panel" element={<PanelPage />} />
            <Route path="/roundtable" element={<RoundTablePage />} />
            <Route path="/roundtable/:id" element={<ConversationPage />} />
            <Route path="/designer" element={<DesignerPage />} />
            <Route path="/history" element={<HistoryPage />} />
            <Route path="/history/:id" element={<ReplayPage />} />
            <Route path="*" element={<NotFound />} />
          </Routes>
        </Suspense>
      </main>
    </>
  );
}

function NotFound() {
  return (
    <section>
      <h1>Not found</h1>
      <p>
        There is nothing at this address. Pick an area above, or go to the <NavLink to="/duel">Duel</NavLink>.
      </p>
    </section>
  );
}
