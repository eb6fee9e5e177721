-- perflsp in Neovim 0.7 or later, without plugins.
--
-- Copy this file to ~/.config/nvim/lua/perflsp.lua and add to init.lua:
--
--   require("perflsp").setup({
--     -- cmd = { "/path/to/venv/bin/perflsp", "serve", "--stdio" },  -- default: perflsp on PATH
--     settings = { run = "onType", debounceMs = 150 },  -- see docs/editors.md for every key
--   })
--
-- One server per project root (the nearest pyproject.toml, perflsp.toml or .git above the file);
-- every Python buffer under that root attaches to it. Diagnostics, quick fixes
-- (vim.lsp.buf.code_action()) and hover (vim.lsp.buf.hover()) then work as for any server.

local M = {}

local defaults = {
  cmd = { "perflsp", "serve", "--stdio" },
  filetypes = { "python" },
  root_markers = { "pyproject.toml", "perflsp.toml", "setup.cfg", "setup.py", ".git" },
  settings = {},
}

local function find_root(path, markers)
  local dir = vim.fn.fnamemodify(path, ":p:h")
  while true do
    for _, marker in ipairs(markers) do
      if vim.loop.fs_stat(dir .. "/" .. marker) then
        return dir
      end
    end
    local parent = vim.fn.fnamemodify(dir, ":h")
    if parent == dir then
      return nil
    end
    dir = parent
  end
end

function M.setup(opts)
  local config = vim.tbl_deep_extend("force", defaults, opts or {})
  local clients = {} -- root -> client id (Neovim 0.7 has no vim.lsp.start to reuse one)

  local function attach(bufnr)
    local name = vim.api.nvim_buf_get_name(bufnr)
    if name == "" or vim.bo[bufnr].buftype ~= "" then
      return
    end
    local root = find_root(name, config.root_markers) or vim.loop.cwd()
    local client_config = {
      name = "perflsp",
      cmd = config.cmd,
      root_dir = root,
      -- Sent at startup; `settings` is sent again in workspace/didChangeConfiguration, which is
      -- how Neovim delivers settings (it does not answer workspace/configuration before 0.8).
      init_options = { settings = config.settings },
      settings = { perflsp = config.settings },
    }
    if vim.lsp.start then -- Neovim 0.8+: reuses the client of the same name and root
      vim.lsp.start(client_config, { bufnr = bufnr })
      return
    end
    local id = clients[root]
    if id == nil or vim.lsp.get_client_by_id(id) == nil then
      id = vim.lsp.start_client(client_config)
      clients[root] = id
    end
    if id then
      vim.lsp.buf_attach_client(bufnr, id)
    end
  end

  local group = vim.api.nvim_create_augroup("perflsp", { clear = true })
  vim.api.nvim_create_autocmd("FileType", {
    group = group,
    pattern = config.filetypes,
    callback = function(args)
      attach(args.buf)
    end,
  })
  -- Buffers already open when setup() runs.
  for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(bufnr) and vim.tbl_contains(config.filetypes, vim.bo[bufnr].filetype) then
      attach(bufnr)
    end
  end
end

return M
