# ruff: noqa: E501  (a text bank: one natural sentence per line reads better than wrapped strings)
"""Italian (it) text bank of the sample corpus."""

TOPICS = {
    "travel": [
        "Il treno notturno da Zurigo a Vienna parte poco dopo le nove e arriva in tempo per la colazione.",
        "Molti viaggiatori sottovalutano il freddo che può fare su un passo di montagna, anche in piena estate.",
        "Il centro storico è abbastanza piccolo da poter essere visitato a piedi in un solo pomeriggio.",
        "Abbiamo prenotato una pensione semplice vicino al porto e ci siamo svegliati con il rumore dei pescherecci.",
        "Un abbonamento regionale del treno costa spesso meno di un biglietto singolo per ogni viaggio.",
        "La traversata in traghetto dura circa due ore, e nelle giornate limpide dal ponte si vedono le isole.",
        "La domenica gli autobus locali passano meno spesso, quindi conviene controllare l'orario in anticipo.",
        "Il sentiero sale costantemente tra i boschi di larici prima di aprirsi su un ampio alpeggio.",
        "Viaggiare fuori stagione significa trovare meno folla e prezzi più bassi per l'alloggio.",
        "Il piccolo museo accanto alla stazione racconta la storia della valle e dei suoi abitanti.",
        "Dopo una lunga giornata di visite ci siamo seduti in terrazza a guardare il sole tramontare sul lago.",
        "È meglio avere con sé un po' di contanti, perché non tutte le capanne di montagna accettano le carte.",
    ],
    "cooking": [
        "Impastare per almeno dieci minuti, finché l'impasto diventa liscio ed elastico.",
        "Un pizzico di sale esalta la dolcezza dei pomodori maturi.",
        "La minestra è ancora più buona il giorno dopo, quando i sapori hanno avuto il tempo di amalgamarsi.",
        "Tostare brevemente le noci in una padella asciutta finché cominciano a profumare.",
        "Per una salsa più leggera si può sostituire metà della panna con brodo vegetale.",
        "Lasciare riposare la carne qualche minuto prima di tagliarla, in modo che i succhi restino all'interno.",
        "Le erbe fresche vanno aggiunte solo alla fine, altrimenti perdono il loro aroma.",
        "Mia nonna faceva il pane ogni sabato mattina, e tutta la casa aveva un profumo meraviglioso.",
        "Patate, cipolle e un po' di formaggio bastano per preparare un piatto caldo in inverno.",
        "La torta è pronta quando uno stecchino di legno infilato al centro esce asciutto.",
        "La verdura di stagione del mercato è di solito più fresca e meno cara di quella del supermercato.",
        "Cuocere la pasta in abbondante acqua salata e scolarla quando è ancora al dente.",
    ],
    "science": [
        "L'acqua si espande quando gela, ed è per questo che il ghiaccio galleggia sulla superficie dei laghi.",
        "Le piante usano la luce del sole per trasformare l'anidride carbonica e l'acqua in zucchero e ossigeno.",
        "I ricercatori hanno misurato la temperatura del ghiacciaio a diverse profondità per tre anni.",
        "La luce del sole impiega poco più di otto minuti per raggiungere la Terra.",
        "I vaccini insegnano al sistema immunitario a riconoscere un agente patogeno prima di una vera infezione.",
        "L'esperimento è stato ripetuto più volte per essere sicuri che i risultati fossero affidabili.",
        "Le api si comunicano a vicenda dove trovare i fiori con una danza particolare.",
        "Il suono si propaga molto più velocemente nell'acqua che nell'aria.",
        "Il cervello umano contiene miliardi di cellule nervose collegate in reti complesse.",
        "I terremoti si verificano quando le placche tettoniche scivolano improvvisamente lungo una faglia.",
        "Una buona teoria scientifica fa previsioni che si possono verificare con l'osservazione.",
        "Il nuovo telescopio permette agli astronomi di osservare galassie nate poco dopo il big bang.",
    ],
    "local_news": [
        "Martedì sera il consiglio comunale ha approvato il bilancio per la ristrutturazione della scuola elementare.",
        "I lavori sulla strada principale continueranno fino alla fine di ottobre.",
        "Lo scorso fine settimana più di duecento volontari hanno aiutato a pulire le rive del fiume.",
        "Dal mese prossimo il mercato settimanale si sposterà nella piazza davanti alla chiesa.",
        "La biblioteca comunale ha ampliato l'orario di apertura ed è ora aperta anche il sabato pomeriggio.",
        "I residenti sono stati invitati a un incontro pubblico per discutere il progetto di una nuova pista ciclabile.",
        "Durante la tempesta i vigili del fuoco sono intervenuti due volte per rimuovere alberi caduti.",
        "Il paese ha festeggiato la riapertura del ponte restaurato con musica e una piccola festa.",
        "Una nuova linea di autobus collegherà i quartieri periferici con la stazione.",
        "Il sindaco ha ringraziato tutte le associazioni per il loro impegno a favore della comunità.",
        "La piscina resterà chiusa quest'estate a causa di riparazioni urgenti.",
        "Alcuni genitori hanno raccolto firme per un attraversamento pedonale più sicuro davanti alla scuola dell'infanzia.",
    ],
    "technology": [
        "Gli aggiornamenti regolari del software chiudono falle di sicurezza che altrimenti gli aggressori potrebbero sfruttare.",
        "Una buona password deve essere lunga e non va mai usata per più di un account.",
        "Molte piccole aziende oggi conservano i propri dati nel cloud invece che su server propri.",
        "Il nuovo smartphone ha una batteria più grande, ma è sensibilmente più pesante del modello precedente.",
        "Il software libero può essere esaminato, modificato e condiviso da chiunque.",
        "Prima di comprare un nuovo portatile conviene chiedersi a che cosa serva davvero.",
        "Un backup è utile solo se si controlla regolarmente che possa davvero essere ripristinato.",
        "Le auto elettriche diventano più popolari man mano che cresce la rete di colonnine di ricarica.",
        "La scuola ha introdotto i tablet in classe e ha formato gli insegnanti a usarli.",
        "I modelli linguistici vengono addestrati su grandi raccolte di testi e imparano a prevedere la parola successiva.",
        "Una connessione internet lenta dipende spesso da un vecchio router più che dal fornitore.",
        "La città sta sperimentando sensori che indicano agli automobilisti i parcheggi liberi.",
    ],
    "history": [
        "Il castello fu costruito nel tredicesimo secolo per controllare la via commerciale attraverso il passo.",
        "Per secoli il monastero fu il più importante centro di cultura della regione.",
        "La ferrovia raggiunse la valle nel 1889 e cambiò per sempre la vita dei suoi abitanti.",
        "Nell'Ottocento molte famiglie emigrarono in America a causa della povertà e della fame.",
        "Il vecchio municipio sopravvisse a un grande incendio che distrusse quasi tutte le case intorno.",
        "Durante la costruzione del nuovo parcheggio gli archeologi hanno trovato monete e ceramiche romane.",
        "La prima menzione scritta del villaggio si trova in un documento dell'anno 1150.",
        "Durante la guerra il ponte ebbe una grande importanza strategica per entrambe le parti.",
        "La stampa rese i libri più economici e aiutò le nuove idee a diffondersi in tutta Europa.",
        "Le donne del paese ottennero il diritto di voto solo dopo una lunga lotta politica.",
        "Il museo espone attrezzi e vestiti che mostrano come vivevano i contadini duecento anni fa.",
        "Il canale fu scavato a mano e i lavori durarono quasi vent'anni.",
    ],
    "sport": [
        "La squadra di casa ha vinto la partita due a uno grazie a un gol all'ultimo minuto.",
        "Migliaia di podisti hanno partecipato alla maratona cittadina nonostante la pioggia.",
        "Lo sci di fondo è uno degli sport di resistenza più impegnativi.",
        "Il giovane tennista ha raggiunto per la prima volta la finale del torneo.",
        "La corsa ciclistica attraversa tre passi di montagna e termina con una salita ripida.",
        "L'attività fisica regolare migliora non solo la forma, ma anche l'umore e il sonno.",
        "L'allenatore ha lodato i giocatori per la disciplina e lo spirito di squadra.",
        "La nuova palestra sarà a disposizione delle scuole e delle società sportive dall'autunno.",
        "La stagione di hockey su ghiaccio comincia a settembre e finisce in primavera con i playoff.",
        "Il nuoto è uno sport dolce, adatto a persone di tutte le età.",
        "La squadra di calcio del paese cerca volontari per allenare le formazioni giovanili.",
        "Dopo un grave infortunio l'atleta ha avuto bisogno di quasi un anno per tornare alle gare.",
    ],
    "nature": [
        "In autunno i larici diventano giallo oro prima di perdere gli aghi.",
        "Lo stambecco era quasi scomparso dalle Alpi, ma è tornato grazie ai programmi di protezione.",
        "Le zone umide trattengono grandi quantità d'acqua e offrono un habitat a molte specie rare.",
        "Il ghiacciaio ha perso più di un terzo del suo volume negli ultimi cinquant'anni.",
        "Le marmotte trascorrono i lunghi mesi invernali dormendo in tane profonde sotto terra.",
        "All'inizio dell'estate i fiori selvatici coprono i prati e attirano innumerevoli insetti.",
        "Il fiume ha ritrovato un corso più naturale e i pesci sono tornati.",
        "I rapaci sfruttano le correnti d'aria calda per planare per ore senza battere le ali.",
        "Il bosco protegge il villaggio sottostante dalle valanghe e dalla caduta di sassi.",
        "Si chiede agli escursionisti di restare sui sentieri per non disturbare la fauna selvatica.",
        "Negli inverni particolarmente freddi il lago gela, ma il ghiaccio è raramente abbastanza sicuro per camminarci sopra.",
        "I funghi hanno un ruolo importante nel bosco perché decompongono il legno morto.",
    ],
}

TITLES = {
    "travel": [
        "Un fine settimana in montagna",
        "Consigli per viaggiare fuori stagione",
        "In treno lungo il lago",
    ],
    "cooking": [
        "Le nostre ricette invernali preferite",
        "Fare il pane in casa",
        "Cucinare semplice con la verdura di stagione",
    ],
    "science": [
        "Come si misurano i ghiacciai",
        "Perché il ghiaccio galleggia",
        "Novità dall'astronomia",
    ],
    "local_news": [
        "Notizie dal consiglio comunale",
        "Lavori sulla strada principale",
        "Una festa per il nuovo ponte",
    ],
    "technology": [
        "Consigli per password sicure",
        "Il cloud conviene alle piccole aziende",
        "Il nuovo smartphone alla prova",
    ],
    "history": [
        "La storia della nostra valle",
        "Quando arrivò la ferrovia",
        "I tesori del museo locale",
    ],
    "sport": [
        "Cronaca della maratona cittadina",
        "Vittoria all'ultimo minuto per la squadra di casa",
        "Sport invernali per principianti",
    ],
    "nature": [
        "Autunno nel bosco di larici",
        "Il ritorno dello stambecco",
        "Proteggere le nostre zone umide",
    ],
}

SECTIONS = {
    "travel": "viaggi",
    "cooking": "ricette",
    "science": "scienza",
    "local_news": "cronaca",
    "technology": "tecnologia",
    "history": "storia",
    "sport": "sport",
    "nature": "natura",
}

TOXIC = [
    "Sei un povero idiota e nessuno vuole leggere la tua spazzatura.",
    "Chiudi la bocca, cretino senza cervello, e torna sotto il tuo sasso.",
    "Solo un perfetto imbecille può scrivere una robaccia così inutile.",
    "Sparisci, fallito miserabile, qui nessuno ti sopporta.",
    "Pagliaccio schifoso, le tue opinioni stupide mi fanno venire la nausea.",
    "Sei solo un rifiuto inutile, vattene e non tornare mai più.",
    "A nessuno importa di te e della tua vita patetica, stupido.",
    "Tutti sanno che sei un bugiardo e un vigliacco senza spina dorsale.",
    "Il tuo cervello deve essere grande come un pisello, idiota ignorante.",
    "Smettila di pubblicare le tue idiozie, troll fastidioso da quattro soldi.",
    "Sei troppo stupido per capire qualsiasi cosa, quindi tieni chiusa quella boccaccia.",
    "Questo autore è un truffatore senza vergogna e un totale incapace.",
]

BOILERPLATE = {
    "cookie": (
        "Questo sito utilizza i cookie per migliorare la tua esperienza. Continuando la navigazione "
        "accetti l'uso dei cookie."
    ),
    "cookie_buttons": ["Accetta tutti", "Solo cookie necessari", "Impostazioni"],
    "nav": [
        "Home",
        "Notizie",
        "Chi siamo",
        "Servizi",
        "Blog",
        "Negozio",
        "Contatti",
        "Note legali",
        "Privacy",
        "Accedi",
    ],
    "read_more": "Leggi di più",
    "related": "Articoli correlati",
    "share": "Condividi questo articolo",
    "newsletter": "Iscriviti alla newsletter",
    "rights": "Tutti i diritti riservati.",
    "back_to_top": "Torna su",
}

SPAM = [
    "economico",
    "compra ora",
    "miglior prezzo",
    "sconto",
    "spedizione gratuita",
    "negozio online",
    "saldi",
    "ordina oggi",
    "scarpe",
    "orologi",
    "affare",
    "offerta speciale",
]

PII = {
    "email": "Per domande su questo articolo scrivete a {email}.",
    "phone": "Potete raggiungere il nostro ufficio al numero {phone_national} oppure dall'estero al {phone_international}.",
    "ipv4": "Durante il guasto il server {ipv4} non è stato raggiungibile per diverse ore.",
    "ipv6": "Il nostro sito è raggiungibile anche in IPv6 all'indirizzo {ipv6}.",
    "iban": "Le donazioni all'associazione possono essere versate sul conto {iban}.",
}

LOOKALIKES = {
    "version": "La versione {version} dell'app degli orari è disponibile dal {date_iso}.",
    "build": "Il {date_local} i computer della biblioteca sono stati aggiornati alla build {build}.",
    "price": "La guida stampata costa {price} e si può ordinare con il codice ISBN {isbn}.",
    "address": "L'ufficio turistico è aperto dalle {time_open} alle {time_close} e si trova a {postcode} {city}.",
}

FOOTER = "Questo articolo è stato rivisto dalla nostra redazione."

LOCALE = {
    "country": "IT",
    "mail_names": [
        "giulia.rossi",
        "marco.bianchi",
        "info",
        "redazione",
        "luca.ferrari",
        "chiara.romano",
    ],
    "cities": [
        ("00184", "Roma"),
        ("20121", "Milano"),
        ("6900", "Lugano"),
        ("24121", "Bergamo"),
        ("6500", "Bellinzona"),
    ],
    "date_local": "{d:02d}/{m:02d}/{y}",
    "price": "{units},{cents:02d} €",
    "isbn_group": "88",
}
