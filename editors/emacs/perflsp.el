;;; perflsp.el --- perflsp (PyTorch performance linter) in Emacs, with eglot or lsp-mode  -*- lexical-binding: t; -*-

;; Load this file from your init (`(load "/path/to/perflsp.el")') or copy the part you use.
;; `perflsp' must be on `exec-path' (e.g. the project's virtualenv activated), or set
;; `perflsp-command' to its full path.

;;; Code:

(defgroup perflsp nil "PyTorch performance linter." :group 'tools)

(defcustom perflsp-command '("perflsp" "serve" "--stdio")
  "How to start the perflsp language server."
  :type '(repeat string))

(defcustom perflsp-settings '(:run "onType" :debounceMs 150 :logLevel "warning")
  "Editor settings sent to the server (see docs/editors.md); they override `[tool.perflsp]'."
  :type 'plist)

;;;; eglot (Emacs 29 ships it; on Emacs 28: M-x package-install RET eglot, or Debian's elpa-eglot)
;; eglot runs one server per major mode: this makes perflsp *the* Python server in eglot. To keep
;; another one (pyright, pylsp) use lsp-mode below, where perflsp runs as an add-on beside it.

(with-eval-after-load 'eglot
  (add-to-list 'eglot-server-programs
               `((python-mode python-ts-mode) . ,perflsp-command))
  ;; eglot answers workspace/configuration from this (per project via .dir-locals.el too).
  (setq-default eglot-workspace-configuration
                (plist-put (copy-sequence (default-value 'eglot-workspace-configuration))
                           :perflsp perflsp-settings)))

;; Start it with M-x eglot in a Python buffer, or always:
;; (add-hook 'python-mode-hook #'eglot-ensure)
;; (add-hook 'python-ts-mode-hook #'eglot-ensure)

;;;; lsp-mode: perflsp as an add-on server beside your usual Python server

(with-eval-after-load 'lsp-mode
  (lsp-register-client
   (make-lsp-client
    :new-connection (lsp-stdio-connection (lambda () perflsp-command))
    :activation-fn (lsp-activate-on "python")
    :add-on? t
    :server-id 'perflsp
    ;; lsp-mode answers the server's workspace/configuration with nothing for an unknown
    ;; section; the server then keeps these initialization options.
    :initialization-options (lambda () (list :settings perflsp-settings)))))

(provide 'perflsp)
;;; perflsp.el ends here
