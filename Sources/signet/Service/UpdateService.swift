import Foundation
import Signet
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The methods of `io.signet.Update` and `org.varlink.service` for one update config
/// (FORMAT.md §9): each call answered on its client's thread.
///
/// Check, Install, Confirm and Rollback run this signet binary as a child (`update --config
/// FILE`, `confirm DIR`, `rollback --config FILE`, each with `--json`), one at a time: what the
/// service does is what the commands do, errors and exit codes included, and a crash in one
/// ends that command, not the service. Status reads DIR's records in the service itself, so it
/// answers at once, also while a command runs.
final class UpdateService: Sendable {
    /// The command running now: one at a time.
    private struct Job {
        let method: String
        let since: String
        var child: ServiceChild?
        var cancelled = false
        var phase: String?
        /// The last event, as its JSON line (a `Sendable` value).
        var lastEvent: Data?
    }

    private let config: String
    private let destination: String
    /// Who may call the methods that change something: root, the service's own user, and the
    /// user that owns the socket file.
    private let owners: Set<uid_t>
    private let job = Mutex<Job?>(nil)
    /// Signalled whenever a job ends (Cancel waits on it).
    private let ended = NSCondition()

    init(config: String, destination: String, socketOwner: uid_t?) {
        self.config = config
        self.destination = destination
        self.owners = Set([0, geteuid()] + (socketOwner.map { [$0] } ?? []))
    }

    /// Answers the calls of one client until it closes the connection or sends what is not a
    /// varlink call.
    func serve(_ connection: VarlinkConnection) {
        while let call = try? connection.nextCall() {
            handle(call, on: connection)
            guard connection.open else { return }
        }
    }

    private func handle(_ call: VarlinkConnection.Call, on connection: VarlinkConnection) {
        let reply = call.oneway ? Reply(nil) : Reply(connection)
        let (interface, method) = Self.split(call.method)
        switch interface {
        case "org.varlink.service":
            switch method {
            case "GetInfo":
                reply.ok([
                    "vendor": "Signet", "product": "signet", "version": SignetVersion.signet, "url": "https://example.org/signet",
                    "interfaces": ["org.varlink.service", UpdateInterface.name]
                ])
            case "GetInterfaceDescription":
                switch call.parameters["interface"] as? String {
                case "org.varlink.service": reply.ok(["description": UpdateInterface.serviceDescription])
                case UpdateInterface.name: reply.ok(["description": UpdateInterface.description])
                case let other?: reply.error("org.varlink.service.InterfaceNotFound", ["interface": other])
                case nil: reply.error("org.varlink.service.InvalidParameter", ["parameter": "interface"])
                }
            default: reply.error("org.varlink.service.MethodNotFound", ["method": call.method])
            }
        case UpdateInterface.name:
            if method == "Status" { return reply.ok(status()) }
            guard ["Check", "Install", "Confirm", "Rollback", "Cancel"].contains(method) else {
                return reply.error("org.varlink.service.MethodNotFound", ["method": call.method])
            }
            guard owners.contains(connection.peerUID) else { return reply.error("org.varlink.service.PermissionDenied") }
            switch method {
            case "Check": run("Check", ["update", "--config", config, "--check", "--json"], reply: reply, shape: Self.checkReply)
            case "Install": install(call, reply: reply, connection: connection)
            case "Confirm": run("Confirm", ["confirm", destination, "--json"], reply: reply) { ["confirmed": $0["confirmed"] ?? NSNull()] }
            case "Rollback":
                run("Rollback", ["rollback", "--config", config, "--json"], reply: reply) {
                    ["rolledBack": $0["rolled_back"] ?? false, "from": $0["from"] ?? NSNull(), "to": $0["to"] ?? NSNull(), "skipped": $0["skipped"] ?? NSNull()]
                }
            default: reply.ok(cancel())
            }
        default:
            reply.error("org.varlink.service.InterfaceNotFound", ["interface": interface])
        }
    }

    /// `io.signet.Update.Install` → (`io.signet.Update`, `Install`).
    static func split(_ method: String) -> (interface: String, method: String) {
        guard let dot = method.lastIndex(of: ".") else { return ("", method) }
        return (String(method[..<dot]), String(method[method.index(after: dot)...]))
    }

    private func install(_ call: VarlinkConnection.Call, reply: Reply, connection: VarlinkConnection) {
        var arguments = ["update", "--config", config, "--json", "--events-fd", "3"]
        switch call.parameters["requireManifestSha256"] {
        case nil, is NSNull: break
        case let hash as String where hash.utf8.count == 64 && hash.allSatisfy({ $0.isASCII && $0.isHexDigit && !$0.isUppercase }):
            arguments += ["--require-manifest-sha256", hash]
        default: return reply.error("org.varlink.service.InvalidParameter", ["parameter": "requireManifestSha256"])
        }
        let more = call.more && !call.oneway
        run("Install", arguments, reply: reply, onEvent: { event in if more { connection.reply(["event": event], continues: true) } }) { ["result": $0] }
    }

    /// What a job's call is answered with.
    private enum Answer {
        case ok([String: Any])
        case error(String, [String: Any])
    }

    /// Runs `signet ARGUMENTS` as `method`'s job, unless another job runs (Busy), and replies
    /// with `shape` of its `--json` document, or its error.
    private func run(
        _ method: String, _ arguments: [String], reply: Reply, onEvent: @escaping ([String: Any]) -> Void = { _ in },
        shape: ([String: Any]) -> [String: Any]
    ) {
        let running: (method: String, since: String)? = job.withLock { current in
            if let current { return (current.method, current.since) }
            current = Job(method: method, since: Timestamp.now.rfc3339)
            return nil
        }
        if let running { return reply.error("io.signet.Update.Busy", ["method": running.method, "since": running.since]) }
        let answer = runJob(arguments, onEvent: onEvent, shape: shape)
        // The job ends before its answer goes out: a client that calls again on that answer
        // is never told Busy by the job it was answered for.
        job.withLock { $0 = nil }
        ended.lock()
        ended.broadcast()
        ended.unlock()
        switch answer {
        case .ok(let parameters): reply.ok(parameters)
        case .error(let name, let parameters): reply.error(name, parameters)
        }
    }

    private func runJob(_ arguments: [String], onEvent: @escaping ([String: Any]) -> Void, shape: ([String: Any]) -> [String: Any]) -> Answer {
        let child: ServiceChild
        do {
            child = try ServiceChild(arguments: arguments)
        } catch {
            return Self.failed(error as? SignetError ?? SignetError(.io, "\(error)"))
        }
        // A Cancel that came before the command started stops it now.
        if job.withLock({
            $0?.child = child; return $0?.cancelled ?? false
        }) {
            child.terminate()
        }
        let outcome = child.wait { event in
            let line = try? JSONSerialization.data(withJSONObject: event, options: [.sortedKeys])
            let phase = event["event"] as? String == "phase" ? event["phase"] as? String : nil
            self.job.withLock {
                $0?.lastEvent = line
                if let phase { $0?.phase = phase }
            }
            onEvent(event)
        }
        if job.withLock({ $0?.cancelled ?? false }), outcome.exitStatus != 0 { return .error("io.signet.Update.Cancelled", [:]) }
        guard let document = outcome.document else {
            let how = outcome.signal.map { "was ended by signal \($0)" } ?? "ended with exit status \(outcome.exitStatus ?? -1) and no result"
            let said = outcome.standardError.split(separator: "\n").last.map { ": \($0)" } ?? ""
            return Self.failed(SignetError(.io, "signet \(arguments[0]) \(how)\(said)"))
        }
        if let error = document["error"] as? [String: Any] {
            return .error("io.signet.Update.Failed", error.filter { ["code", "exit", "message", "file", "entry"].contains($0.key) })
        }
        return .ok(shape(document))
    }

    /// A failure of the service itself, as the commands report theirs.
    private static func failed(_ error: SignetError) -> Answer {
        let body = Output.errorBody(error)
        return .error(
            "io.signet.Update.Failed",
            ["code": body.code, "exit": body.exit, "message": body.message, "file": body.file ?? NSNull(), "entry": body.entry ?? NSNull()])
    }

    private static func checkReply(_ document: [String: Any]) -> [String: Any] {
        let available = document["available"] as? [String: Any] ?? [:]
        return [
            "updateAvailable": document["update_available"] ?? false, "installed": document["installed"] ?? NSNull(),
            "available": [
                "name": available["name"] ?? "", "version": available["version"] ?? "", "sequence": available["sequence"] ?? 0,
                "manifestSha256": available["manifest_sha256"] ?? ""
            ],
            "report": document
        ]
    }

    /// Stops the running job and waits for it to end (at most `seconds`).
    func cancel(waitingUpTo seconds: Double = 30) -> [String: Any] {
        let target: (method: String, child: ServiceChild?)? = job.withLock { current in
            guard current != nil else { return nil }
            current!.cancelled = true
            return (current!.method, current!.child)
        }
        guard let target else { return ["cancelled": false, "method": NSNull()] }
        target.child?.terminate()
        ended.lock()
        let deadline = Date(timeIntervalSinceNow: seconds)
        while job.withLock({ $0?.cancelled == true }) && ended.wait(until: deadline) {}
        ended.unlock()
        return ["cancelled": true, "method": target.method]
    }

    /// DIR's releases as `status DIR --json` gives them, and the running job.
    private func status() -> [String: Any] {
        let running: [String: Any]? = job.withLock { $0 }.map { current in
            let event = current.lastEvent.flatMap { try? JSONSerialization.jsonObject(with: $0) }
            return ["method": current.method, "since": current.since, "phase": current.phase ?? NSNull(), "lastEvent": event ?? NSNull()]
        }
        let report = (try? Installer.status(of: destination)).map { Status.DestinationReport(destination, $0) }
        let document = report.flatMap { try? JSONSerialization.jsonObject(with: JSONEncoder().encode($0)) as? [String: Any] } ?? ["destination": destination]
        let bad = (document["bad"] as? [[String: Any]] ?? []).map {
            ["name": $0["name"] ?? "", "sequence": $0["sequence"] ?? 0, "reason": $0["reason"] ?? "", "at": $0["at"] ?? ""]
        }
        return [
            "destination": destination, "current": document["current"] ?? NSNull(), "previous": document["previous"] ?? NSNull(),
            "pending": document["pending"] ?? false, "bad": bad, "heldBack": document["channel"] ?? NSNull(), "running": running ?? NSNull(),
            "report": document
        ]
    }

    /// Where a call's answer goes: nowhere for a `oneway` call.
    private struct Reply {
        let connection: VarlinkConnection?
        init(_ connection: VarlinkConnection?) { self.connection = connection }

        func ok(_ parameters: [String: Any]) { connection?.reply(parameters) }
        func error(_ name: String, _ parameters: [String: Any] = [:]) { connection?.error(name, parameters) }
    }
}
