/** A run's usage as the API shows it (`usage_view`): tokens and USD, of which the prompt tokens read from the
 * provider's prompt cache and the tokens spent reasoning, each with its cost. */
export interface UsageTotals {
  totalTokens?: number;
  costUsd?: number;
  cachedTokens?: number; // of totalTokens: prompt tokens read from the provider's prompt cache
  reasoningTokens?: number; // of totalTokens: spent reasoning
  cachedCostUsd?: number;
  reasoningCostUsd?: number;
}
