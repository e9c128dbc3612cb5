// What a request may claim: the Critical class and the decision header are
// granted to nobody, to anyone, or to clients whose verified token carries an
// allowed value (Envoy's jwt_authn puts the claim in a request header; the
// filter removes every client-sent one first, so only a verified claim is read).

/** Who a claim (Critical class, decision debug) is honoured for. */
export const enum Gate { Nobody = 0, Anyone = 1, Claim = 2 }

/** A claim header's value (one value, or a comma-separated list) holds one of `allowed`. */
export function claimAllows(ptr: usize, len: i32, allowed: string[]): bool {
  const values = String.UTF8.decodeUnsafe(ptr, <usize>len).split(",");
  for (let i = 0; i < values.length; i++) if (allowed.includes(values[i].trim())) return true;
  return false;
}

/** Whether the request may be served at Critical: `claimed` is whether its verified claim allows it. */
export function mayClaimCritical(gate: Gate, claimed: bool): bool {
  return gate == Gate.Anyone || (gate == Gate.Claim && claimed);
}

/** Whether the answer explains the decision: every answer for Anyone, else only one asked for by an allowed claim. */
export function explainsDecision(gate: Gate, asked: bool, claimed: bool): bool {
  return gate == Gate.Anyone || (gate == Gate.Claim && asked && claimed);
}

/**
 * Where a request's tenant (whose fair share of a held queue it draws on)
 * comes from: nowhere (all requests share one), the client's x-llm-tenant
 * header (fairness between cooperating clients), or a verified JWT claim
 * (between clients who cannot pose as one another).
 */
export const enum TenantFrom { Nobody = 0, Header = 1, Claim = 2 }
