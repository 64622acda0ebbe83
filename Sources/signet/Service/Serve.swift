import ArgumentParser
import Foundation
import Signet
import Synchronization
internal import CSignetSystem
#if canImport(Glibc)
import Glibc
#endif

/// `signet serve`: the update service of one installed directory on a varlink socket
/// (FORMAT.md §9), for a UI or a device agent.
struct Serve: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve io.signet.Update on a varlink socket: check, install, status, confirm, rollback and cancel for an update config's DIR.",
        usage: "signet serve --varlink <address> --config <file> [<options>]",
        discussion: """
            The methods (FORMAT.md §9, docs/varlink/io.signet.Update.varlink) run what the \
            commands do: Check is `update --config FILE --check`, Install is `update --config \
            FILE` (its events as replies, bound with requireManifestSha256 to the release a \
            person confirmed), Confirm and Rollback are `confirm DIR` and `rollback`; one at a \
            time (another gets the Busy error), Cancel stops the running one with DIR as it was. \
            Status answers at once from DIR's records. Failures carry Signet's error codes.

            Who may call what: Status is open to whoever may open the socket (mode 0660: its \
            owner and --group); every other method needs the socket's owner, the service's user \
            or root (SO_PEERCRED), else PermissionDenied.

            Started by systemd (signet-serve@NAME.socket, packaging/systemd), the service \
            takes the socket systemd passes (LISTEN_FDS) and PATH only names it. Run by hand, \
            it makes the socket at PATH (a stale one of an ended service is replaced, a live \
            one refused) and removes it when it ends (SIGTERM, SIGINT: a running command is \
            cancelled first).

            Examples:
              signet serve --varlink unix:/run/signet/app.varlink \\
                --config /etc/signet/update.d/app.conf --group signet
              python3 -m varlink.cli call \\
                unix:/run/signet/app.varlink/io.signet.Update.Status {}
            """
    )

    @Option(
        name: .long, help: ArgumentHelp("The socket: unix:PATH (an absolute path; abstract sockets have no permissions and are refused).", valueName: "address")
    )
    var varlink: String

    @Option(name: .long, help: ArgumentHelp("The update config of the directory served (as signet update --config takes it).", valueName: "file"))
    var config: String

    @Option(name: .long, help: ArgumentHelp("The group that may ask for Status (a socket made here: 0660, this group).", valueName: "name"))
    var group: String?

    @OptionGroup var output: OutputOptions

    /// Clients served at once; more wait in the socket's backlog.
    static let clients = 32

    func validate() throws {
        guard varlink.hasPrefix("unix:/") else {
            throw ValidationError(
                "--varlink takes unix:/absolute/path, not '\(varlink)' (an abstract socket, unix:@NAME, has no file permissions to keep Status to a group)")
        }
        guard socketPath.utf8.count < 108 else { throw ValidationError("--varlink: the socket path is longer than 107 bytes") }
    }

    var socketPath: String { String(varlink.dropFirst("unix:".count)) }

    func run() throws {
        let (destination, _, _) = try Rollback.destination(nil, state: nil, config: config)
        let (listener, made) = try ServiceSocket.open(socketPath, group: group)
        let owner = ServiceSocket.owner(of: socketPath)
        let service = UpdateService(config: config, destination: destination, socketOwner: owner)
        let path = socketPath
        Signals.beforeExit.withLock {
            $0 = {
                _ = service.cancel(waitingUpTo: 5)
                if made { unlink(path) }
            }
        }
        Signals.onInterrupt("a command it ran was cancelled; its destination is as it was")
        Output.standardError("signet serve: \(UpdateInterface.name) for \(destination) on \(varlink)\n")
        let serving = Atomic<Int>(0)
        while true {
            let client = signet_accept_cloexec(listener.descriptor.rawValue)
            if client < 0 {
                if [EINTR, ECONNABORTED, EMFILE, ENFILE, ENOBUFS, ENOMEM].contains(errno) {
                    if errno != EINTR && errno != ECONNABORTED { usleep(100_000) }
                    continue
                }
                throw SignetError.posix(errno, "cannot accept a client", path: path, call: "accept4")
            }
            guard serving.add(1, ordering: .relaxed).newValue <= Self.clients else {
                // Full: this one is closed at once (its client sees the connection end).
                serving.subtract(1, ordering: .relaxed)
                close(client)
                continue
            }
            guard let connection = try? VarlinkConnection(adopting: client) else {
                serving.subtract(1, ordering: .relaxed)
                continue
            }
            let thread = Thread {
                service.serve(connection)
                serving.subtract(1, ordering: .relaxed)
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
    }
}
