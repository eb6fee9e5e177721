//! Zed runs `perflsp serve --stdio` for Python files.
//!
//! The server is the `perflsp` on the project's PATH (its virtualenv when Zed sees it activated),
//! unless `lsp.perflsp.binary.path` in Zed's settings names another. `lsp.perflsp.settings`
//! reaches the server as its editor settings (see docs/editors.md).
use zed_extension_api::{self as zed, settings::LspSettings, LanguageServerId, Result};

struct Perflsp;

impl zed::Extension for Perflsp {
    fn new() -> Self {
        Perflsp
    }

    fn language_server_command(
        &mut self,
        language_server_id: &LanguageServerId,
        worktree: &zed::Worktree,
    ) -> Result<zed::Command> {
        let binary = LspSettings::for_worktree(language_server_id.as_ref(), worktree)
            .ok()
            .and_then(|settings| settings.binary);
        let command = binary
            .as_ref()
            .and_then(|b| b.path.clone())
            .or_else(|| worktree.which("perflsp"))
            .ok_or_else(|| {
                "perflsp is not on PATH: `pip install perflsp` in the project's environment, \
                 or set lsp.perflsp.binary.path"
                    .to_string()
            })?;
        let args = binary
            .and_then(|b| b.arguments)
            .unwrap_or_else(|| vec!["serve".into(), "--stdio".into()]);
        Ok(zed::Command { command, args, env: worktree.shell_env() })
    }

    fn language_server_initialization_options(
        &mut self,
        language_server_id: &LanguageServerId,
        worktree: &zed::Worktree,
    ) -> Result<Option<zed::serde_json::Value>> {
        let settings = LspSettings::for_worktree(language_server_id.as_ref(), worktree)
            .ok()
            .and_then(|s| s.settings);
        Ok(settings.map(|s| zed::serde_json::json!({ "settings": s })))
    }

    fn language_server_workspace_configuration(
        &mut self,
        language_server_id: &LanguageServerId,
        worktree: &zed::Worktree,
    ) -> Result<Option<zed::serde_json::Value>> {
        // The server asks for the `perflsp` section of this value.
        let settings = LspSettings::for_worktree(language_server_id.as_ref(), worktree)
            .ok()
            .and_then(|s| s.settings);
        Ok(settings.map(|s| zed::serde_json::json!({ "perflsp": s })))
    }
}

zed::register_extension!(Perflsp);
