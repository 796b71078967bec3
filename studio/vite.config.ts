// Builds Parley Studio into the Python package (api/static/studio), so `pip install` carries it and
// `parley serve` needs no Node. The build must be reproducible: CI rebuilds and compares the bytes.
import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

export default defineConfig({
  plugins: [react()],
  base: "/",
  build: {
    outDir: "../api/static/studio",
    emptyOutDir: true,
    sourcemap: false,
    // Content-hashed names under /assets are served as immutable; index.html is never cached.
    assetsDir: "assets",
    chunkSizeWarningLimit: 800,
  },
  server: {
    // `npm run dev` proxies the API to a local `parley serve`.
    proxy: Object.fromEntries(
      ["/api", "/v1", "/healthz"].map((p) => [p, { target: "http://127.0.0.1:8000", changeOrigin: false }]),
    ),
  },
});
