-- Drives a real Neovim (0.7+) through "Profile this function": ask for the code actions on a
-- def, run the offered command (the server spawns the runtime), wait for the measured verdict
-- diagnostic (source perflsp-profile) and write what happened as JSON for the Python test.
-- Inputs (environment): PERFLSP_CMD (JSON list), PERFLSP_ROOT, PERFLSP_FILE, PERFLSP_OUT, PERFLSP_LINE.

local out_path = vim.env.PERFLSP_OUT
local report = {}

local function finish(ok)
  report.ok = ok
  local f = assert(io.open(out_path, "w"))
  f:write(vim.fn.json_encode(report))
  f:close()
  vim.cmd(ok and "qa!" or "cq!")
end

local function fail(message)
  report.error = message
  finish(false)
end

local function measured(bufnr)
  local out = {}
  for _, d in ipairs(vim.diagnostic.get(bufnr)) do
    if d.source == "perflsp-profile" then
      table.insert(out, { code = d.code, lnum = d.lnum, message = d.message, severity = d.severity })
    end
  end
  return out
end

local ok, err = pcall(function()
  vim.cmd("edit " .. vim.fn.fnameescape(vim.env.PERFLSP_FILE))
  local bufnr = vim.api.nvim_get_current_buf()
  local client_id = vim.lsp.start_client({
    name = "perflsp",
    cmd = vim.fn.json_decode(vim.env.PERFLSP_CMD),
    root_dir = vim.env.PERFLSP_ROOT,
    init_options = { settings = { profile = { minTime = 0.02, timeout = 60 } } },
  })
  if not client_id then return fail("vim.lsp.start_client failed") end
  vim.lsp.buf_attach_client(bufnr, client_id)
  local client = vim.lsp.get_client_by_id(client_id)
  if not vim.wait(15000, function() return client.initialized end, 50) then
    return fail("the server did not initialize")
  end

  local line = tonumber(vim.env.PERFLSP_LINE)
  local params = {
    textDocument = vim.lsp.util.make_text_document_params(bufnr),
    range = { start = { line = line, character = 0 }, ["end"] = { line = line, character = 0 } },
    context = { diagnostics = {} },
  }
  local chosen
  report.titles = {}
  local responses = vim.lsp.buf_request_sync(bufnr, "textDocument/codeAction", params, 15000) or {}
  for _, response in pairs(responses) do
    for _, action in ipairs(response.result or {}) do
      table.insert(report.titles, action.title)
      if not chosen and action.title:find("^Profile this function") then chosen = action end
    end
  end
  if not chosen then return fail("no 'Profile this function' action") end
  local command = chosen.command
  if type(command) ~= "table" then command = chosen end  -- a bare Command
  local reply = client.request_sync("workspace/executeCommand",
    { command = command.command, arguments = command.arguments }, 120000, bufnr)
  if not reply or reply.err then return fail("executeCommand failed: " .. vim.inspect(reply)) end
  report.reply = reply.result
  if not vim.wait(15000, function() return #measured(bufnr) > 0 end, 50) then
    return fail("no perflsp-profile diagnostic within 15 s")
  end
  report.measured = measured(bufnr)
  client.stop()
  vim.wait(5000, function() return client.is_stopped() end, 50)
  finish(true)
end)
if not ok then fail("lua error: " .. tostring(err)) end
