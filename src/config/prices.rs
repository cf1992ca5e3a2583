//! Prices of common models on their providers' public endpoints, so that
//! cost is counted (and `--max-cost` can stop a run) without `--price-in`
//! and `--price-out`. USD per million tokens, input and output, as the
//! providers list them for standard (not batch, not cached) use; they change,
//! so a flag or `model.price_in` / `model.price_out` always wins. A model
//! served from any other base URL (a local server, a proxy) gets no price
//! from here: its name says nothing about what it costs there.

use super::ProviderKind;

/// USD per million tokens of each kind.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Listed {
    pub input: f64,
    pub output: f64,
    /// Input read from the prompt cache.
    pub cached_input: f64,
    /// Input written to the prompt cache.
    pub cache_write: f64,
}

/// (provider, model name prefix, input, output, cached input, cache write).
/// The longest matching prefix wins, so `gpt-4o-mini` is not priced as
/// `gpt-4o`. OpenAI writes its cache for nothing; Anthropic bills a 5-minute
/// cache write at 1.25 times input and a read at a tenth.
const TABLE: &[(ProviderKind, &str, f64, f64, f64, f64)] = &[
    (ProviderKind::OpenAi, "gpt-4o", 2.50, 10.00, 1.25, 2.50),
    (ProviderKind::OpenAi, "gpt-4o-mini", 0.15, 0.60, 0.075, 0.15),
    (ProviderKind::OpenAi, "gpt-4.1", 2.00, 8.00, 0.50, 2.00),
    (ProviderKind::OpenAi, "gpt-4.1-mini", 0.40, 1.60, 0.10, 0.40),
    (
        ProviderKind::OpenAi,
        "gpt-4.1-nano",
        0.10,
        0.40,
        0.025,
        0.10,
    ),
    (ProviderKind::OpenAi, "o3", 2.00, 8.00, 0.50, 2.00),
    (ProviderKind::OpenAi, "o4-mini", 1.10, 4.40, 0.275, 1.10),
    (
        ProviderKind::Anthropic,
        "claude-opus-4",
        15.00,
        75.00,
        1.50,
        18.75,
    ),
    (
        ProviderKind::Anthropic,
        "claude-sonnet-4",
        3.00,
        15.00,
        0.30,
        3.75,
    ),
    (
        ProviderKind::Anthropic,
        "claude-haiku-4-5",
        1.00,
        5.00,
        0.10,
        1.25,
    ),
    (
        ProviderKind::Anthropic,
        "claude-3-5-haiku",
        0.80,
        4.00,
        0.08,
        1.00,
    ),
];

/// The built-in prices of `model` at `provider`'s public endpoint
/// (`base_url` None), if it is in the table.
pub fn known(provider: ProviderKind, model: &str, base_url: Option<&str>) -> Option<Listed> {
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
        .map(|&(_, _, input, output, cached_input, cache_write)| Listed {
            input,
            output,
            cached_input,
            cache_write,
        })
}

/// (provider, model name prefix, context window in tokens), as the
/// providers document them. The longest matching prefix wins.
const WINDOWS: &[(ProviderKind, &str, u64)] = &[
    (ProviderKind::OpenAi, "gpt-4o", 128_000),
    (ProviderKind::OpenAi, "gpt-4.1", 1_047_576),
    (ProviderKind::OpenAi, "o3", 200_000),
    (ProviderKind::OpenAi, "o4-mini", 200_000),
    (ProviderKind::OpenAi, "gpt-5", 400_000),
    (ProviderKind::OpenAi, "deepseek-chat", 128_000),
    (ProviderKind::OpenAi, "deepseek-reasoner", 128_000),
    (ProviderKind::Anthropic, "claude-", 200_000),
];

/// The context window of `model`, if it is in the table (whatever server
/// serves it: the window is the model's).
pub fn context_window(provider: ProviderKind, model: &str) -> Option<u64> {
    let provider = match provider {
        ProviderKind::Responses => ProviderKind::OpenAi,
        other => other,
    };
    WINDOWS
        .iter()
        .filter(|(p, prefix, _)| *p == provider && model.starts_with(prefix))
        .max_by_key(|(_, prefix, _)| prefix.len())
        .map(|&(_, _, n)| n)
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
        let io = |l: Option<Listed>| l.map(|l| (l.input, l.output));
        assert_eq!(io(known(openai, "gpt-4o-mini", None)), Some((0.15, 0.60)));
        assert_eq!(
            io(known(openai, "gpt-4o-2024-08-06", None)),
            Some((2.50, 10.00))
        );
        assert_eq!(
            known(ProviderKind::Anthropic, "claude-sonnet-4-5", None),
            Some(Listed {
                input: 3.00,
                output: 15.00,
                cached_input: 0.30,
                cache_write: 3.75
            })
        );
        assert_eq!(
            io(known(ProviderKind::Responses, "o4-mini", None)),
            Some((1.10, 4.40))
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
        assert_eq!(context_window(openai, "gpt-4o-mini"), Some(128_000));
        assert_eq!(context_window(ProviderKind::Responses, "o3"), Some(200_000));
        assert_eq!(
            context_window(anthropic, "claude-sonnet-4-5"),
            Some(200_000)
        );
        assert_eq!(context_window(openai, "smollm2"), None);
    }
}
