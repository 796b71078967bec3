/** The example workflows shipped in `designer/examples/`, bundled as their exact text. */
const files = import.meta.glob<string>("../../../../designer/examples/*.json", { query: "?raw", import: "default" });

export const EXAMPLES: { name: string; load: () => Promise<string> }[] = Object.entries(files)
  .map(([path, load]) => ({ name: path.split("/").pop()!.replace(/\.json$/, ""), load }))
  .sort((a, b) => a.name.localeCompare(b.name));
