-- Drives a real Neovim (0.7+) against `perflsp serve`: open a file, wait for the diagnostics,
-- apply the first PFL106 quick fix (resolving it lazily, as Neovim does), wait for the new
-- diagnostics, and write what happened as JSON for the Python test to check.
-- Inputs (environment): PERFLSP_CMD (JSON list), PERFLSP_ROOT, PERFLSP_FILE, PERFLSP_OUT.

local out_path = vim.env.PERFLSP_OUT
local report = { steps = {} }

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

local function codes(bufnr)
  local out = {}
  for _, d in ipairs(vim.diagnostic.get(bufnr)) do
    table.insert(out, { code = d.code, lnum = d.lnum, col = d.col, end_col = d.end_col, message = d.message })
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
    init_options = { settings = { debounceMs = 50, preview = true } },  -- PFL106 is a preview rule
  })
  if not client_id then return fail("vim.lsp.start_client failed") end
  vim.lsp.buf_attach_client(bufnr, client_id)

  -- The PFL106 on a pinned source: the one whose fix (`non_blocking=True`) is safe.
  local function pfl106()
    for _, d in ipairs(vim.diagnostic.get(bufnr)) do
      local line = vim.api.nvim_buf_get_lines(bufnr, d.lnum, d.lnum + 1, false)[1] or ""
      if d.code == "PFL106" and line:find("pin_memory", 1, true) then return d end
    end
  end
  if not vim.wait(30000, function() return pfl106() ~= nil end, 50) then
    return fail("no PFL106 diagnostic within 30 s; got " .. vim.fn.json_encode(codes(bufnr)))
  end
  report.before = codes(bufnr)
  local target = pfl106()
  report.target = { lnum = target.lnum, col = target.col, line = vim.api.nvim_buf_get_lines(bufnr, target.lnum, target.lnum + 1, false)[1] }

  local params = {
    textDocument = vim.lsp.util.make_text_document_params(bufnr),
    range = { start = { line = target.lnum, character = target.col }, ["end"] = { line = target.end_lnum, character = target.end_col } },
    context = { diagnostics = {} },
  }
  local responses = vim.lsp.buf_request_sync(bufnr, "textDocument/codeAction", params, 15000) or {}
  local chosen
  report.titles = {}
  for _, response in pairs(responses) do
    for _, action in ipairs(response.result or {}) do
      table.insert(report.titles, action.title)
      if not chosen and action.title:find("^PFL106") then chosen = action end
    end
  end
  if not chosen then return fail("no PFL106 quick fix offered") end
  local client = vim.lsp.get_client_by_id(client_id)
  report.lazy = chosen.edit == nil
  if chosen.edit == nil then
    local resolved = client.request_sync("codeAction/resolve", chosen, 15000, bufnr)
    if not resolved or resolved.err then return fail("resolve failed: " .. vim.inspect(resolved)) end
    chosen = resolved.result
  end
  vim.lsp.util.apply_workspace_edit(chosen.edit, client.offset_encoding)
  report.after_line = vim.api.nvim_buf_get_lines(bufnr, target.lnum, target.lnum + 1, false)[1]

  -- The edit changed the buffer; the server must re-lint and drop the fixed finding (a transfer
  -- its run named may now be reported on its own).
  local function fixed_gone()
    for _, d in ipairs(vim.diagnostic.get(bufnr)) do
      if d.code == "PFL106" and d.lnum == target.lnum then return false end
    end
    return true
  end
  if not vim.wait(30000, fixed_gone, 50) then
    return fail("diagnostics did not update after the fix: " .. vim.fn.json_encode(codes(bufnr)))
  end
  report.after = codes(bufnr)
  report.text = table.concat(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false), "\n") .. "\n"
  client.stop()
  vim.wait(5000, function() return client.is_stopped() end, 50)
  finish(true)
end)
if not ok then fail("lua error: " .. tostring(err)) end
