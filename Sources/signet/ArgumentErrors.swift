import Foundation
import ArgumentParser

/// ArgumentParser's messages in Signet's style: lower case like every other error,
/// "out of range" for a number that does not fit, a "did you mean" that prefers the option the
/// typed one begins (`--sig` → `--signature`), and the secret-safe options for `--passphrase`.
enum ArgumentErrors {
    static func restyle(_ message: String, arguments: [String] = Array(CommandLine.arguments.dropFirst())) -> String {
        var text = message
        if let range = text.range(of: #"^Missing expected argument '([^']*)'"#, options: .regularExpression) {
            let name = String(text[range]).dropFirst("Missing expected argument '".count).dropLast()
            text = "missing \(name)" + text[range.upperBound...]
        } else if let range = text.range(of: #"^Missing value for '([^']*)'"#, options: .regularExpression) {
            let name = String(text[range]).dropFirst("Missing value for '".count).dropLast()
            text = "\(name) needs a value" + text[range.upperBound...]
        } else if let range = text.range(of: #"^The value '[^']*' is invalid for '[^']*'"#, options: .regularExpression) {
            let parts = text[range].split(separator: "'", omittingEmptySubsequences: false)
            if parts.count >= 4 {
                let value = parts[1], option = parts[3].split(separator: " ").first ?? parts[3]
                let negative = value.hasPrefix("-") && value.dropFirst().allSatisfy(\.isNumber)
                let number = value.allSatisfy(\.isNumber)
                // An option with named values (yes|no): the values are what it takes, not numbers.
                let named = text[range.upperBound...].contains("Please provide one of")
                text =
                    "\(option) '\(value)' is \(named ? "not one of its values" : negative || number ? "out of range" : "not a whole number")"
                    + text[range.upperBound...]
            }
        } else if let range = text.range(of: #"^Unknown option '([^']*)'(\. Did you mean '[^']*'\?)?"#, options: .regularExpression) {
            let typed = String(text[range].split(separator: "'")[1])
            text =
                "unknown option '\(typed)'" + (suggestion(for: typed, arguments: arguments).map { "; did you mean \($0)?" } ?? "") + text[range.upperBound...]
        } else if let first = text.first, first.isUppercase, !text.hasPrefix("TLS") {
            text = first.lowercased() + text.dropFirst()
        }
        return text
    }

    /// The option `typed` most likely meant, among the options of the command being run.
    static func suggestion(for typed: String, arguments: [String]) -> String? {
        if typed == "--passphrase" || typed == "--pin-value" || typed == "--password" {
            return "--passphrase-file FILE or --passphrase-env VAR (a secret is never taken from the command line)"
        }
        let options = Self.options(of: command(for: arguments))
        let bare = typed.drop { $0 == "-" }
        if let prefixed = options.filter({ $0.dropFirst(2).hasPrefix(bare) }).min(by: { $0.count < $1.count }) { return prefixed }
        let close = options.map { ($0, distance(String($0.dropFirst(2)), String(bare))) }.filter { $0.1 <= 2 }
        return close.min { $0.1 < $1.1 }?.0
    }

    /// The first `--option` in `arguments` that the command they name does not have (before a
    /// `--` that ends the options), or nil. ArgumentParser checks a command's own rules (such as
    /// `sign --out` with one FILE) before it reports an unknown option, so a mistyped option
    /// whose value was then taken as an argument was reported as that rule: the
    /// unknown option is what to say first.
    static func firstUnknownOption(in arguments: [String]) -> String? {
        let command = command(for: arguments)
        // Hidden options a command takes only to refuse them by name are known too.
        let refused = command == Update.self ? UpdateTrustOptions.refusedOptions : []
        let known = Set(options(of: command) + refused + ["--help", "--version", "--json"])
        for word in arguments {
            if word == "--" { break }
            guard word.hasPrefix("--"), word.count > 2 else { continue }
            let name = String(word.prefix { $0 != "=" })
            if !known.contains(name) { return name }
        }
        return nil
    }

    /// The subcommand the arguments name (the root command when none).
    static func command(for arguments: [String]) -> ParsableCommand.Type {
        var command: ParsableCommand.Type = SignetCommand.self
        for word in arguments where !word.hasPrefix("-") {
            guard let next = command.configuration.subcommands.first(where: { $0._commandName == word }) else { break }
            command = next
        }
        return command
    }

    /// Every `--option` the command's help lists (its option lines, not options named in prose,
    /// such as curl's `--pinnedpubkey`).
    static func options(of command: ParsableCommand.Type) -> [String] {
        let help = SignetCommand.helpMessage(for: command)
        var found: [String] = []
        for line in help.split(separator: "\n") {
            let words = line.drop { $0 == " " }
            // Option lines are indented by two spaces; continuation lines of help by many.
            guard words.hasPrefix("-"), line.count - words.count <= 4 else { continue }
            // `-q, --quiet`, `--tls-ca <file>`: the option names before the value and the help.
            for word in words.split(separator: " ") {
                let name = word.trimmingCharacters(in: CharacterSet(charactersIn: ","))
                guard name.hasPrefix("--") else { if name.hasPrefix("-") { continue } else { break } }
                if !found.contains(name) { found.append(name) }
            }
        }
        return found
    }

    /// "; did you mean NAME?" for a mistyped name among `names`, or nothing.
    static func didYouMean(_ typed: String, among names: [String]) -> String {
        if let prefixed = names.filter({ $0.hasPrefix(typed) || typed.hasPrefix($0) }).min(by: { $0.count < $1.count }) {
            return "; did you mean '\(prefixed)'?"
        }
        let close = names.map { ($0, distance($0, typed)) }.filter { $0.1 <= max(2, typed.count / 4) }
        return close.min { ($0.1, $0.0) < ($1.1, $1.0) }.map { "; did you mean '\($0.0)'?" } ?? ""
    }

    /// Levenshtein distance.
    static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        guard !a.isEmpty else { return b.count }
        var previous = Array(0...b.count)
        for i in 1...a.count {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in stride(from: 1, through: b.count, by: 1) {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
    }
}
