-- Loads the shipped Neovim config (editors/neovim/perflsp.lua) as a user would, opens a file and
-- reports the diagnostics and the client's root. Inputs as in nvim_quickfix.lua, plus PERFLSP_EDITORS.

local report = {}

local function finish(ok, message)
  report.ok, report.error = ok, message
  local f = assert(io.open(vim.env.PERFLSP_OUT, "w"))
  f:write(vim.fn.json_encode(report))
  f:close()
  vim.cmd(ok and "qa!" or "cq!")
end

local ok, err = pcall(function()
  vim.cmd("filetype on") -- -u skips the user's init, and with it filetype detection
  package.path = vim.env.PERFLSP_EDITORS .. "/neovim/?.lua;" .. package.path
  require("perflsp").setup({ cmd = vim.fn.json_decode(vim.env.PERFLSP_CMD), settings = { debounceMs = 50 } })
  vim.cmd("edit " .. vim.fn.fnameescape(vim.env.PERFLSP_FILE))
  local bufnr = vim.api.nvim_get_current_buf()
  if not vim.wait(30000, function() return #vim.diagnostic.get(bufnr) > 0 end, 50) then
    return finish(false, "no diagnostics within 30 s")
  end
  report.codes = {}
  for _, d in ipairs(vim.diagnostic.get(bufnr)) do
    table.insert(report.codes, d.code)
  end
  local clients = vim.lsp.buf_get_clients(bufnr)
  report.clients = {}
  for _, client in pairs(clients) do
    table.insert(report.clients, { name = client.name, root = client.config.root_dir })
    client.stop()
  end
  finish(true)
end)
if not ok then finish(false, "lua error: " .. tostring(err)) end
