//! Prices of common models on their providers' public endpoints, so that
//! cost is counted (and `--max-cost` can stop a run) without `--price-in`
//! and `--price-out`. USD per million tokens, input and output, as the
//! providers list them for standard (not batch, not cached) use; they change,
//! so a flag or `model.price_in` / `model.price_out` always wins. A model
//! served from any other base URL (a local server, a proxy) gets no price
//! from here: its name says nothing about what it costs there.

use super::ProviderKind;

/// (provider, model name prefix, input, output). The longest matching
/// prefix wins, so `gpt-4o-mini` is not priced as `gpt-4o`.
const TABLE: &[(ProviderKind, &str, f64, f64)] = &[
    (ProviderKind::OpenAi, "gpt-4o", 2.50, 10.00),
    (ProviderKind::OpenAi, "gpt-4o-mini", 0.15, 0.60),
    (ProviderKind::OpenAi, "gpt-4.1", 2.00, 8.00),
    (ProviderKind::OpenAi, "gpt-4.1-mini", 0.40, 1.60),
    (ProviderKind::OpenAi, "gpt-4.1-nano", 0.10, 0.40),
    (ProviderKind::OpenAi, "o3", 2.00, 8.00),
    (ProviderKind::OpenAi, "o4-mini", 1.10, 4.40),
    (ProviderKind::Anthropic, "claude-opus-4", 15.00, 75.00),
    (ProviderKind::Anthropic, "claude-sonnet-4", 3.00, 15.00),
    (ProviderKind::Anthropic, "claude-haiku-4-5", 1.00, 5.00),
    (ProviderKind::Anthropic, "claude-3-5-haiku", 0.80, 4.00),
];

/// The built-in (input, output) price of `model` at `provider`'s public
/// endpoint (`base_url` None), if it is in the table.
pub fn known(provider: ProviderKind, model: &str, base_url: Option<&str>) -> Option<(f64, f64)> {
    if base_url.is_some() {
        return None;
    }
    // Both OpenAI APIs serve the same models at the same prices.
    let provider = match provider {
        ProviderKind::Responses => ProviderKind::OpenAi,
        other => other,
    };
    TABLE
        .iter()
        .filter(|(p, prefix, ..)| *p == provider && model.starts_with(prefix))
        .max_by_key(|(_, prefix, ..)| prefix.len())
        .map(|&(_, _, input, output)| (input, output))
}

/// (provider, model name prefix, most output tokens of one reply), as the
/// providers document them. The longest matching prefix wins.
const OUTPUT_LIMITS: &[(ProviderKind, &str, u32)] = &[
    (ProviderKind::Anthropic, "claude-opus-4", 32_000),
    (ProviderKind::Anthropic, "claude-opus-4-5", 64_000),
    (ProviderKind::Anthropic, "claude-sonnet-4", 64_000),
    (ProviderKind::Anthropic, "claude-haiku-4-5", 64_000),
    (ProviderKind::Anthropic, "claude-3-5-haiku", 8_192),
];

/// The most output tokens one reply of `model` may have, if it is in the
/// table (whatever server serves it: the limit is the model's).
pub fn max_output(provider: ProviderKind, model: &str) -> Option<u32> {
    OUTPUT_LIMITS
        .iter()
        .filter(|(p, prefix, _)| *p == provider && model.starts_with(prefix))
        .max_by_key(|(_, prefix, _)| prefix.len())
        .map(|&(_, _, n)| n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_prefix_at_the_public_endpoint_only() {
        let openai = ProviderKind::OpenAi;
        assert_eq!(known(openai, "gpt-4o-mini", None), Some((0.15, 0.60)));
        assert_eq!(
            known(openai, "gpt-4o-2024-08-06", None),
            Some((2.50, 10.00))
        );
        assert_eq!(
            known(ProviderKind::Anthropic, "claude-sonnet-4-5", None),
            Some((3.00, 15.00))
        );
        assert_eq!(
            known(openai, "gpt-4o", Some("http://127.0.0.1:11434/v1")),
            None
        );
        assert_eq!(known(openai, "qwen2.5-coder:7b", None), None);
        assert_eq!(known(ProviderKind::Anthropic, "gpt-4o", None), None);
        assert_eq!(known(ProviderKind::Script, "gpt-4o", None), None);
        let anthropic = ProviderKind::Anthropic;
        assert_eq!(max_output(anthropic, "claude-sonnet-4-5"), Some(64_000));
        assert_eq!(max_output(anthropic, "claude-opus-4-1"), Some(32_000));
        assert_eq!(max_output(anthropic, "claude-opus-4-5"), Some(64_000));
        assert_eq!(max_output(openai, "gpt-4o"), None);
    }
}
