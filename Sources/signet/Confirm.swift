import ArgumentParser
import Signet

struct Confirm: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "confirm",
        abstract: "Mark DIR's pending release good: it is no longer rolled back at the next boot.",
        discussion: """
            A release installed with --pending waits for this: the application (or its health \
            check) runs it once it works. Until then, a restart of the machine makes the boot unit \
            (signet-boot-check@NAME.service) swap the previous release back. Exit 0, also when no \
            release was pending.

            Example:
              signet confirm /opt/app
            """
    )

    @Argument(help: ArgumentHelp("The installed directory.", valueName: "dir"))
    var dest: String

    @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Seconds to wait while another signet updates DIR (default 10).", valueName: "seconds"))
    var wait: Double = 10

    @OptionGroup var output: OutputOptions

    func validate() throws {
        if !(0...86_400).contains(wait) { throw ValidationError("--wait takes 0 to 86400 seconds, not \(wait)") }
    }

    struct Report: Encodable {
        let destination: String
        @Null var confirmed: Update.Release?
    }

    func run() throws {
        let confirmed = try Installer.confirm(dest, wait: wait)
        if output.json {
            Output.json(Report(destination: dest, confirmed: confirmed.map { .init(name: $0.name, version: $0.version, sequence: $0.sequence) }))
            return
        }
        if let confirmed {
            Output.line("confirmed \(confirmed.description) in \(dest): it stays installed across restarts")
        } else {
            Output.line("nothing to confirm: no release of \(dest) is pending")
        }
    }
}
