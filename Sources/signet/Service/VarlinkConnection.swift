import Foundation
import Signet
internal import CSignetSystem
#if canImport(Glibc)
import Glibc
#endif

/// One client of `signet serve` on its UNIX socket: varlink's framing (each message one JSON
/// object ended by a NUL byte, https://varlink.org/Method-Call), nothing of the methods.
///
/// A message is read whole before it is parsed, up to ``largestMessage``: a client that sends
/// more without a NUL, bytes that are not UTF-8 JSON, or a JSON value that is not an object
/// ends the connection (varlink has no error reply for a message it cannot read).
///
/// One thread uses a connection at a time (the one serving its client, which also relays the
/// events of an install to it): `@unchecked Sendable` only to be handed to that thread.
final class VarlinkConnection: @unchecked Sendable {
    /// The longest message a client may send (calls are a method name and a few parameters).
    static let largestMessage = 64 << 10

    /// What a client asked: one method call.
    struct Call {
        let method: String
        let parameters: [String: Any]
        /// The client takes several replies (`more`): each but the last with `continues`.
        let more: Bool
        /// The client takes no reply at all.
        let oneway: Bool
    }

    enum ReadFailure: Error, CustomStringConvertible {
        case closed
        case tooLong
        case notAMessage(String)

        var description: String {
            switch self {
            case .closed: return "the client closed the connection"
            case .tooLong: return "a message longer than \(VarlinkConnection.largestMessage) bytes without its NUL"
            case .notAMessage(let why): return "not a varlink call: \(why)"
            }
        }
    }

    private let socket: OwnedDescriptor
    private var buffer: [UInt8] = []
    /// The client's uid (SO_PEERCRED), fixed when it connected.
    let peerUID: uid_t
    /// False once a write failed: the client has gone; later replies are dropped.
    private(set) var open = true

    init(adopting raw: Int32) throws {
        socket = OwnedDescriptor(adopting: raw)
        var uid: uid_t = 0
        let failure = signet_peer_uid(raw, &uid)
        guard failure == 0 else { throw SignetError(.io, "cannot tell who connected to the service: \(String(cString: strerror(failure)))") }
        peerUID = uid
        // A client that stops reading is taken as gone after this long: its replies are
        // dropped and the command it started runs on (it never waits on a client).
        var timeout = timeval(tv_sec: Self.sendTimeout, tv_usec: 0)
        _ = setsockopt(raw, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Seconds a reply may wait for a client to read.
    static let sendTimeout = 10

    /// The next call, waiting for it.
    func nextCall() throws(ReadFailure) -> Call {
        while true {
            if let end = buffer.firstIndex(of: 0) {
                let message = Array(buffer[..<end])
                buffer.removeSubrange(...end)
                return try Self.parse(message)
            }
            guard buffer.count < Self.largestMessage else { throw .tooLong }
            var chunk = [UInt8](repeating: 0, count: 16 << 10)
            let n = chunk.withUnsafeMutableBytes { read(socket.descriptor.rawValue, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw .closed }
            buffer.append(contentsOf: chunk[..<n])
        }
    }

    static func parse(_ message: [UInt8]) throws(ReadFailure) -> Call {
        guard let value = try? JSONSerialization.jsonObject(with: Data(message), options: []) else { throw .notAMessage("not JSON") }
        guard let object = value as? [String: Any] else { throw .notAMessage("not a JSON object") }
        guard let method = object["method"] as? String, !method.isEmpty else { throw .notAMessage("no \"method\"") }
        var parameters: [String: Any] = [:]
        if let given = object["parameters"], !(given is NSNull) {
            guard let dictionary = given as? [String: Any] else { throw .notAMessage("\"parameters\" is not an object") }
            parameters = dictionary
        }
        func flag(_ key: String) throws(ReadFailure) -> Bool {
            guard let given = object[key], !(given is NSNull) else { return false }
            // JSONSerialization gives true and false as NSNumbers of type "c"; 1 and 0 are "i"/"q".
            guard let number = given as? NSNumber, String(cString: number.objCType) == "c" else { throw .notAMessage("\"\(key)\" is not true or false") }
            return number.boolValue
        }
        return Call(method: method, parameters: parameters, more: try flag("more"), oneway: try flag("oneway"))
    }

    /// A reply: `parameters`, and `continues` when more replies to the same call follow.
    func reply(_ parameters: [String: Any], continues: Bool = false) {
        var message: [String: Any] = ["parameters": parameters]
        if continues { message["continues"] = true }
        send(message)
    }

    /// An error reply: a varlink error name (`io.signet.Update.Busy`) and its parameters.
    func error(_ name: String, _ parameters: [String: Any] = [:]) {
        send(["error": name, "parameters": parameters])
    }

    private func send(_ message: [String: Any]) {
        guard open, var data = try? JSONSerialization.data(withJSONObject: message, options: [.sortedKeys, .withoutEscapingSlashes]) else { return }
        data.append(0)
        data.withUnsafeBytes { bytes in
            var done = 0
            while done < bytes.count {
                // MSG_NOSIGNAL: a client that went away is an EPIPE here, not a SIGPIPE.
                let n = Glibc.send(socket.descriptor.rawValue, bytes.baseAddress! + done, bytes.count - done, Int32(MSG_NOSIGNAL))
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else {
                    open = false
                    return
                }
                done += n
            }
        }
    }
}
