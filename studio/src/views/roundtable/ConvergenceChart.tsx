/** Convergence across the debate rounds of one question, with the threshold at which the table stops. The axis
 * has the rounds the table ran (a table that stopped early draws no round it never had), each in the middle of
 * its own slot. */
import { AxisBottom, AxisLeft } from "@visx/axis";
import { Group } from "@visx/group";
import { scaleLinear } from "@visx/scale";
import { Line, LinePath } from "@visx/shape";

import type { RtPoint } from "../../streams/roundtable";

// Drawn in a fixed coordinate space; the SVG scales to its container (a phone gets a smaller chart).
const WIDTH = 600;
const HEIGHT = 220;
const MARGIN = { top: 16, right: 24, bottom: 36, left: 44 };
const INNER_W = WIDTH - MARGIN.left - MARGIN.right;
const INNER_H = HEIGHT - MARGIN.top - MARGIN.bottom;

export function ConvergenceChart({ points, rounds, threshold }: { points: RtPoint[]; rounds: number; threshold: number }) {
  if (points.length === 0) return <p className="muted">No debate round has been scored yet.</p>;
  const last = Math.max(1, rounds, ...points.map((p) => p.roundNumber));
  const x = scaleLinear<number>({ domain: [0.5, last + 0.5], range: [0, INNER_W] });
  const y = scaleLinear<number>({ domain: [0, 1], range: [INNER_H, 0] });
  const summary = points.map((p) => `round ${p.roundNumber}: ${p.score.toFixed(2)}`).join(", ");
  return (
    <figure className="chart">
      <svg
        viewBox={`0 0 ${WIDTH} ${HEIGHT}`}
        width="100%"
        role="img"
        aria-label={`Convergence by round (threshold ${threshold.toFixed(2)}): ${summary}`}
        className="convergence-chart"
      >
        <Group left={MARGIN.left} top={MARGIN.top}>
          <AxisLeft scale={y} tickValues={[0, 0.25, 0.5, 0.75, 1]} tickFormat={(v) => Number(v).toFixed(2)}
                    stroke="var(--muted)" tickStroke="var(--muted)"
                    tickLabelProps={{ fill: "var(--text)", fontSize: 12 }} />
          <AxisBottom top={INNER_H} scale={x} tickValues={Array.from({ length: last }, (_, i) => i + 1)} tickFormat={(v) => `round ${v}`}
                      stroke="var(--muted)" tickStroke="var(--muted)" tickLabelProps={{ fill: "var(--text)", fontSize: 12 }} />
          <Line from={{ x: 0, y: y(threshold) }} to={{ x: INNER_W, y: y(threshold) }} stroke="var(--warn)" strokeWidth={2}
                strokeDasharray="6 4" className="threshold-line" />
          <text x={INNER_W} y={y(threshold) - 6} textAnchor="end" fill="var(--warn)" fontSize={12}>
            threshold {threshold.toFixed(2)}
          </text>
          <LinePath data={points} x={(p) => x(p.roundNumber)} y={(p) => y(p.score)} stroke="var(--accent)" strokeWidth={2} />
          {points.map((p) => (
            <circle
              key={p.roundNumber}
              className="convergence-point"
              data-round={p.roundNumber}
              data-score={p.score}
              cx={x(p.roundNumber)}
              cy={y(p.score)}
              r={6}
              fill="var(--accent)"
              stroke="var(--surface)"
              strokeWidth={2}
            >
              <title>{`Round ${p.roundNumber}: ${p.score.toFixed(2)}`}</title>
            </circle>
          ))}
        </Group>
      </svg>
      <figcaption>
        Convergence after each debate round; at {threshold.toFixed(2)} the table stops.
      </figcaption>
      <table className="sr-only">
        <caption>Convergence by round</caption>
        <tbody>
          {points.map((p) => (
            <tr key={p.roundNumber}>
              <th scope="row">Round {p.roundNumber}</th>
              <td>{p.score.toFixed(2)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </figure>
  );
}
