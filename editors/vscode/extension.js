// The BAM extension: starts `bamasc lsp` over stdio for .bam files. With the
// server turned off (or not installed), documents are still formatted by
// piping them through `bamasc fmt -`. Plain CommonJS: no build step; run
// `npm install` in this folder once for vscode-languageclient.
"use strict";

const vscode = require("vscode");
const { spawn } = require("child_process");

let client;

function settings() {
  const config = vscode.workspace.getConfiguration("bamasc");
  return { command: config.get("path", "bamasc"), server: config.get("server.enabled", true) };
}

async function activate(context) {
  const { command, server } = settings();
  if (server) {
    const { LanguageClient, TransportKind } = require("vscode-languageclient/node");
    const executable = { command, args: ["lsp"], transport: TransportKind.stdio };
    client = new LanguageClient(
      "bamasc",
      "bamasc lsp",
      { run: executable, debug: executable },
      { documentSelector: [{ scheme: "file", language: "bam" }, { scheme: "untitled", language: "bam" }] }
    );
    await client.start();
    context.subscriptions.push(client);
    return;
  }
  context.subscriptions.push(
    vscode.languages.registerDocumentFormattingEditProvider("bam", {
      provideDocumentFormattingEdits(document) {
        return formatWithCli(command, document);
      },
    })
  );
}

// The whole document through `bamasc fmt -`: one edit replacing everything,
// or none when the text does not parse (fmt prints the error on stderr).
function formatWithCli(command, document) {
  return new Promise((resolve) => {
    const child = spawn(command, ["fmt", "-"]);
    let out = "";
    let err = "";
    child.stdout.on("data", (chunk) => (out += chunk));
    child.stderr.on("data", (chunk) => (err += chunk));
    child.on("error", (problem) => {
      vscode.window.showErrorMessage(`bamasc fmt: ${problem.message}`);
      resolve([]);
    });
    child.on("close", (code) => {
      if (code !== 0) {
        vscode.window.setStatusBarMessage(`bamasc fmt: ${err.split("\n")[0]}`, 5000);
        resolve([]);
        return;
      }
      const all = new vscode.Range(document.positionAt(0), document.positionAt(document.getText().length));
      resolve(out === document.getText() ? [] : [vscode.TextEdit.replace(all, out)]);
    });
    child.stdin.end(document.getText());
  });
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
